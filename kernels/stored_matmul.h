// Linear layers whose weights stay in the format the model file stores them in: F16 and BF16
// rows, and the block formats Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K. Nothing is dequantized at
// load, so a loaded GGUF takes about its file size and a decode step reads 4.5-8.5 bits per
// weight instead of 32.
//
// Block formats are computed the way ggml computes them on x86. For Q8_0, Q4_0 and Q4_1 each
// activation row is quantized to 8-bit blocks of 32 (with the block sum, for Q4_1's offset), each
// 32-value weight slice (kernels/weight_slices.h) gives eight exact integer lane sums, and the
// scales are accumulated into eight fp32 lanes with FMA and summed pairwise at the end, offsets in
// a separate fp32 chain: ggml's own order, so greedy outputs agree with llama.cpp on the same GGUF.
// For the K-quants (Q4_K, Q5_K, Q6_K) the activations are quantized in ggml's Q8_K layout, one fp32
// scale per 256 values with the sums of each 16, and a whole 256-value super-block is summed exactly in
// int32 (every value times its run's integer scale; the minima times the activation sums) before
// one or two fp32 FMAs into one chain per output, as ggml does. F16/BF16 rows are widened to fp32
// and use eight FMA lanes over the row, in order.
//
// Every output element is computed by the same operations in the same order whatever the batch
// size and tiling, so results are batch-invariant (DEVELOPERS.md), and the AVX2 kernels are
// bit-identical to linear_stored_reference.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/dtype.h"

namespace tq {

// True when linear_stored() takes weights of this type as stored.
bool has_stored_linear(DType weight_type);

// x: [n, in] fp32; w: [out] rows of `in` values stored as `weight_type` (in a multiple of the
// type's block); bias: [out] or nullptr; y: [n, out]. AVX2+FMA+F16C tiles when the CPU has
// them (chosen at run time), else the reference.
void linear_stored(const float* x, int64_t n, int64_t in, DType weight_type, const uint8_t* w, int64_t out,
                   const float* bias, float* y);
// One product of linear_stored_many(): y: [n, out] = x · wᵀ + bias, w stored as `type`.
struct StoredProduct {
  DType type;
  const uint8_t* w;
  int64_t out;
  const float* bias;  // [out] or nullptr
  float* y;
  int group_rows = 0;  // > 0: w is in kernels/interleaved_rows.h's layout with groups of this many rows
};
// Several products of the same input x: [n, in] (q, k and v; gate and up), each output exactly
// what linear_stored() alone gives. The activations are quantized once and all the products'
// rows are shared out among the threads in one parallel loop.
void linear_stored_many(const float* x, int64_t n, int64_t in, const StoredProduct* products, int count);

// Which kernels linear_stored_many runs on this CPU, in words (for `tqserve info`), e.g. "AVX-512
// VNNI, rows interleaved 16 at a time; AMX tiles for Q4_K and Q6_K at 16+ tokens".
std::string stored_weight_kernels();
// The same arithmetic in plain C++, one output element at a time: what the SIMD kernels are
// tested to equal bit for bit.
void linear_stored_reference(const float* x, int64_t n, int64_t in, DType weight_type, const uint8_t* w, int64_t out,
                             const float* bias, float* y);

// One 32-value block of quantized activations: scale d and d·Σq, both rounded through fp16
// as ggml's Q8_1 stores them.
struct ActivationBlock {
  float d;
  float s;
  int8_t qs[32];
};

// x: [n_elems] (a multiple of 32) → blocks: [n_elems / 32]. Rounds half to even like
// _mm256_round_ps(_MM_ROUND_NEAREST).
void quantize_activations(const float* x, int64_t n_elems, ActivationBlock* blocks);

// 256 activation values quantized for the K-quant products in ggml's Q8_K layout: the values, one
// fp32 scale d = max|x| / 127 (not rounded through fp16; ggml forms it as 1 / (-127 / max), which can
// differ in the last bit), and the exact sum of each 16 values (what the minima of Q4_K/Q5_K and
// Q6_K's offset of 32 multiply).
struct SuperblockActivation {
  int8_t qs[256];
  float d;
  int16_t sums[16];
};

// x: [n_elems] (a multiple of 256) → blocks: [n_elems / 256], values rounded half to even; a block
// whose max|x| is below 127 / FLT_MAX (so 127 / max would overflow) becomes all zeros, as an all-zero
// one does (quantize_activations likewise).
void quantize_superblock_activations(const float* x, int64_t n_elems, SuperblockActivation* blocks);

}  // namespace tq
