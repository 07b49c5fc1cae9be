#include "kernels/activation.h"

#include <cmath>

namespace tq {

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  // Elementwise, so splitting it among threads changes no result.
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace tq
