// SwiGLU gating: out = silu(gate) * up, elementwise.
#pragma once
#include <cstdint>

namespace tq {

// gate, up, out: [n] (out may alias gate).
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

}  // namespace tq
