// Linear layers whose weights stay in their stored 4/8-bit block format (Q4_0, Q4_1, Q8_0),
// computed the way ggml computes them on x86: each activation row is quantized to 8-bit blocks
// of 32 (Q8_0 for Q4_0/Q8_0 weights, Q8_1 with its block sum for Q4_1), block dot products are
// exact integer sums, and the per-block scales are accumulated in eight fp32 lanes with FMA and
// summed pairwise at the end. Matching that order makes greedy outputs agree with llama.cpp on
// the same GGUF; the weights are read at 4.5-8.5 bits each instead of 32.
#pragma once
#include <cstdint>

#include "kernels/dtype.h"

namespace tq {

// True when linear_quantized() takes weights of this type directly.
bool has_quantized_linear(DType weight_type);

// x: [n, in] fp32; w: [out] rows of `in` values in `weight_type` blocks (in % 32 == 0);
// bias: [out] or nullptr; y: [n, out].
void linear_quantized(const float* x, int64_t n, int64_t in, DType weight_type, const uint8_t* w, int64_t out,
                      const float* bias, float* y);

// One 32-value block of quantized activations: scale d and (Q8_1) d·Σq, both already rounded
// through fp16 as ggml stores them.
struct ActivationBlock {
  float d;
  float s;
  int8_t qs[32];
};

// x: [n_elems] (a multiple of 32) → blocks: [n_elems / 32]. Rounds half to even like
// _mm256_round_ps(_MM_ROUND_NEAREST).
void quantize_activations(const float* x, int64_t n_elems, ActivationBlock* blocks);

// Dot product of one weight row with quantized activations, in ggml's AVX2 accumulation order.
// AVX2 when the CPU has it (chosen at run time); allow_simd = false runs the scalar reference,
// which gives the same result bit for bit.
float dot_quantized_row(DType weight_type, const uint8_t* row, const ActivationBlock* act, int64_t n_blocks,
                        bool allow_simd = true);

}  // namespace tq
