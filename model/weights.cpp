#include "model/weights.h"

#include <cstring>

#include "kernels/dequantize.h"
#include "kernels/matmul.h"
#include "kernels/stored_matmul.h"

namespace tq {

void apply_linear(const LinearWeights& lw, const float* x, int64_t n, float* y) {
  if (lw.dtype == DType::F32) {
    linear(x, n, lw.in, lw.w.data(), lw.out, lw.bias_or_null(), y);
  } else {
    linear_stored(x, n, lw.in, lw.dtype, lw.packed.data(), lw.out, lw.bias_or_null(), y);
  }
}

void linear_row(const LinearWeights& lw, int64_t index, float* dst) {
  if (lw.dtype == DType::F32) {
    std::memcpy(dst, lw.w.data() + index * lw.in, sizeof(float) * lw.in);
  } else {
    const size_t row_bytes = dtype_row_bytes(lw.dtype, lw.in);
    dequantize_row(lw.dtype, lw.packed.data() + index * row_bytes, dst, lw.in);
  }
}

}  // namespace tq
