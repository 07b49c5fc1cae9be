// RMSNorm as Hugging Face computes it, in fp32: y = x * rsqrt(mean(x²) + eps) * w.
#pragma once
#include <cstdint>

namespace tq {

// x, y: [n, d] (may alias); w: [d].
void rms_norm(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y);

}  // namespace tq
