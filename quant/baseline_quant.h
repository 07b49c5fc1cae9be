// The KV-cache baselines llama.cpp offers, for honest comparison with TurboQuant in the same
// engine: q8_0 and q4_0, 32-element blocks with an fp16 scale, quantized exactly as ggml's
// reference quantize_row_q8_0_ref / quantize_row_q4_0_ref (block layouts: kernels/ggml_blocks.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace tq {

// x: [n] with n % 32 == 0; out: n/32 blocks of 34 (q8_0) or 18 (q4_0) bytes.
void quantize_row_q8_0(const float* x, int n, uint8_t* out);
void quantize_row_q4_0(const float* x, int n, uint8_t* out);

}  // namespace tq
