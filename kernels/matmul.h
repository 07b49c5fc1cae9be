// Dense fp32 linear layers: y = x · Wᵀ (+ b), the shape of torch.nn.Linear.
// Weights are fp32 for now (quantized files are dequantized at load); OpenBLAS does the GEMM
// and uses both cores.
#pragma once
#include <cstdint>

namespace tq {

// x: [n, in] row-major; w: [out, in] row-major; bias: [out] or nullptr; y: [n, out].
void linear(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias, float* y);

}  // namespace tq
