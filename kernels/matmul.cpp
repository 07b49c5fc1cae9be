#include "kernels/matmul.h"

#include <cblas.h>

namespace tq {

void linear(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias, float* y) {
  if (n == 1) {
    // y[out] = W[out, in] · x[in]
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(out), static_cast<int>(in), 1.0f, w,
                static_cast<int>(in), x, 1, 0.0f, y, 1);
  } else {
    // y[n, out] = x[n, in] · W[out, in]ᵀ
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(out),
                static_cast<int>(in), 1.0f, x, static_cast<int>(in), w, static_cast<int>(in), 0.0f, y,
                static_cast<int>(out));
  }
  if (bias) {
    for (int64_t t = 0; t < n; ++t) {
      float* row = y + t * out;
      for (int64_t o = 0; o < out; ++o) row[o] += bias[o];
    }
  }
}

}  // namespace tq
