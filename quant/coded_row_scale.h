// What the encoders of vector-coded TurboQuant rows (tq4p pairs, tq3o / tq2o orthant codes) share:
// the rotated unit row they code, and the row scale by TqScaleMode (the codes and scale alternate
// for least_squares, the norm is corrected or kept as it is otherwise).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "quant/rotation.h"
#include "quant/tq_row.h"

// The arithmetic here has fused multiply-add candidates: a file that includes this header and
// whose rows must be the same in every build compiles without contraction, as pair_codebook.cpp
// and orthant_codebook.cpp do (CMakeLists.txt).
namespace tq {

// y = R (x / n) for the rotation's d; returns n = ||x|| (summed in double). A zero row gives y = 0.
inline float rotated_unit_row(const float* x, const Rotation& rotation, float* y) {
  const int d = rotation.dim();
  float u[512];
  double sum = 0.0;
  for (int j = 0; j < d; ++j) sum += double(x[j]) * x[j];
  const float n = static_cast<float>(std::sqrt(sum));
  const float inv = n > 0.0f ? 1.0f / n : 0.0f;
  for (int j = 0; j < d; ++j) u[j] = x[j] * inv;
  rotation.apply(u, y);
  return n;
}

// idx[0, count) holds the codes assign(1) chose for the unit row y = R x / n. assign(inv_alpha)
// re-chooses them for y * inv_alpha; sums(&yc, &cc) gives <y, yhat> and ||yhat||^2 of the current
// codes in double. least_squares: at most three rounds of (alpha = yc / cc, codes for y / alpha),
// ending once a round leaves the codes as they were (the rounds left would change nothing), then
// n * alpha of the last codes; norm_corrected: n / ||yhat||; plain_norm: n. A zero norm stays 0.
template <class Assign, class Sums>
float coded_row_scale(TqScaleMode mode, float n, uint8_t* idx, int count, Assign&& assign, Sums&& sums) {
  double yc, cc;
  if (mode == TqScaleMode::least_squares && n > 0.0f) {
    double alpha = 1.0;
    uint8_t before[512];
    for (int round = 0; round < 3; ++round) {
      sums(&yc, &cc);
      if (!(yc > 0.0)) break;
      alpha = yc / cc;
      std::memcpy(before, idx, size_t(count));
      assign(static_cast<float>(1.0 / alpha));
      if (std::memcmp(before, idx, size_t(count)) == 0) break;
    }
    sums(&yc, &cc);
    if (yc > 0.0) alpha = yc / cc;
    return static_cast<float>(double(n) * alpha);
  }
  if (mode == TqScaleMode::norm_corrected && n > 0.0f) {
    sums(&yc, &cc);
    return static_cast<float>(double(n) / std::sqrt(cc));
  }
  return n;
}

}  // namespace tq
