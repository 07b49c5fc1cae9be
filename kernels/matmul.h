// Dense fp32 linear layers: y = x · Wᵀ (+ b), the shape of torch.nn.Linear.
//
// linear() is batch-invariant: each output element is computed by the same sequence of
// operations whatever the number of tokens and whichever other sequences share the batch
// (8 fused-multiply-add lanes over k in order, a fixed lane reduction, the tail, the bias), so a
// request's output at temperature 0 does not depend on what it is batched with. OpenBLAS's
// sgemm/sgemv pick blockings and kernels by shape, which changes the summation order with the
// batch; it stays available as linear_openblas for comparison (bench/linear_f32.cpp).
#pragma once
#include <cstdint>

namespace tq {

// x: [n, in] row-major; w: [out, in] row-major; bias: [out] or nullptr; y: [n, out].
// AVX2+FMA when the CPU has it (bit-identical to linear_reference_order), else that.
void linear(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias, float* y);
// The same arithmetic in plain C++ (std::fma lanes): the reference the SIMD kernel is tested to.
void linear_reference_order(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias,
                            float* y);
// OpenBLAS: faster for large batches, but not batch-invariant. Not in a TQ_SLIM build.
void linear_openblas(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias, float* y);

}  // namespace tq
