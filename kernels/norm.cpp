#include "kernels/norm.h"

#include <cmath>

namespace tq {

void rms_norm(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y) {
  // Rows are independent and each is computed in one order on one thread, so the results do not
  // depend on the threads (a prefill's rows were 4 % of its time on one thread while the other waited).
#pragma omp parallel for schedule(static) if (n * d >= (int64_t{1} << 16))
  for (int64_t t = 0; t < n; ++t) {
    const float* xr = x + t * d;
    float* yr = y + t * d;
    double sum_sq = 0;  // double: the mean of squares must not lose the small rows' precision
    for (int64_t i = 0; i < d; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(d)) + eps);
    for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv_rms * w[i];
  }
}

}  // namespace tq
