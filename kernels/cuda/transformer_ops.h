// The element-wise and row-wise steps of a decoder layer on the GPU, as host functions that
// launch one kernel each on `stream`. Every pointer is device memory; activations are fp32, as on
// the CPU. Each output element is computed by the same operations whatever the batch, so a
// token's result does not depend on what it is batched with.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/rope.h"

namespace tq::cuda {

// How a matrix's elements are held in device memory.
enum class Element { F32, F16, BF16 };
size_t element_bytes(Element e);
const char* element_name(Element e);

// x[t] = table[ids[t]] as fp32. table: [rows, cols] of `e`; ids: [n]; x: [n, cols].
void embed_rows(const void* table, Element e, int64_t cols, const int32_t* ids, int n, float* x, cudaStream_t stream);

// y = x * rsqrt(mean(x²) + eps) * w per row of d (the CPU's arithmetic: sum of squares in double,
// one fp32 inverse, two fp32 products per element). x, y: [rows, d] (may alias); w: [d].
void rms_norm(const float* x, const float* w, int64_t rows, int d, float eps, float* y, cudaStream_t stream);

// RoPE in place on x: [n, n_heads, head_dim], token t at positions[t]; inv_freq: [head_dim / 2].
void rope(float* x, int n, int n_heads, int head_dim, const int32_t* positions, const float* inv_freq,
          RopePairing pairing, cudaStream_t stream);

// out = gate / (1 + exp(-gate)) * up, n elements (out may alias gate).
void silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);

// x += y, n elements.
void add_in_place(float* x, const float* y, int64_t n, cudaStream_t stream);

// y[r, c] += bias[c] for rows × cols.
void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

// out[i] = x[i] rounded to `e` (round to nearest even), n elements.
void convert_floats(const float* x, int64_t n, Element e, void* out, cudaStream_t stream);

}  // namespace tq::cuda
