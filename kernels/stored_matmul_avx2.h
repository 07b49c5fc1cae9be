// The AVX2+FMA+F16C kernels behind linear_stored() (kernels/stored_matmul.h). Their file is
// compiled with those instruction sets enabled; call them only when the CPU has all three.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/dtype.h"

namespace tq {

struct ActivationBlock;
struct SuperblockActivation;

// quantize_activations() (kernels/stored_matmul.h), bit for bit; false (blocks unspecified)
// when x holds an infinity or NaN.
bool quantize_activations_avx2(const float* x, int64_t n_elems, ActivationBlock* blocks);
// quantize_superblock_activations(), bit for bit; false (blocks unspecified) for an infinity or NaN.
bool quantize_superblock_activations_avx2(const float* x, int64_t n_elems, SuperblockActivation* blocks);

// Output rows are computed in panels of kStoredPanelRows (the last one shorter); these compute
// panels [p_begin, p_end) of one product on the calling thread, so that the caller can share
// out the panels of one or several products among its threads.
constexpr int64_t kStoredPanelRows = 16;  // a panel's slices stay in L1 across a batch's tokens
static_assert(kStoredPanelRows % 16 == 0, "a panel is whole groups of interleaved rows (8 or 16)");

// act: [n, n_slices] quantized activations; w: [out] rows of row_bytes; y: [n, out].
void linear_slices_avx2_panels(DType weight_type, const ActivationBlock* act, int64_t n, int64_t n_slices,
                               const uint8_t* w, size_t row_bytes, int64_t out, const float* bias, float* y,
                               int64_t p_begin, int64_t p_end);
// Q4_K, Q5_K or Q6_K rows as stored, bit-identical to linear_stored_reference.
// act: [n, n_super] (quantize_superblock_activations); w: [out] rows of row_bytes; y: [n, out].
void linear_k_superblocks_avx2_panels(DType weight_type, const SuperblockActivation* act, int64_t n, int64_t n_super,
                                      const uint8_t* w, size_t row_bytes, int64_t out, const float* bias, float* y,
                                      int64_t p_begin, int64_t p_end);
// F16/BF16 rows. x: [n, in]; w: [out] rows of row_bytes; y: [n, out].
void linear_half_avx2_panels(DType weight_type, const float* x, int64_t n, int64_t in, const uint8_t* w,
                             size_t row_bytes, int64_t out, const float* bias, float* y, int64_t p_begin,
                             int64_t p_end);

// Interleaved rows (kernels/interleaved_rows.h; Q4_1): groups [g_begin, g_end) of 8 rows of one
// product, bit-identical to linear_slices_avx2_panels on the same rows in the stored layout.
// act: [n, n_slices]; w: `out` interleaved rows; y: [n, out].
void linear_interleaved_avx2_groups(DType weight_type, const ActivationBlock* act, int64_t n, int64_t n_slices,
                                    const uint8_t* w, int64_t out, const float* bias, float* y, int64_t g_begin,
                                    int64_t g_end);

}  // namespace tq
