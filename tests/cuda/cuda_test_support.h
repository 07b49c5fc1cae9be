// What the CUDA tests share: skipping where no GPU is, and comparing arrays by relative norm.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_status.h"

#define TQ_REQUIRE_CUDA()                                                         \
  do {                                                                            \
    std::string why;                                                              \
    if (::tq::cuda::device_count(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

namespace tq::test {

// The repository: $TQ_SOURCE_DIR where set (a copy elsewhere, as on a lent GPU machine), else the
// one this binary was built from.
inline std::string source_dir() {
  const char* env = std::getenv("TQ_SOURCE_DIR");
  return env && *env ? std::string(env) : std::string(TQ_SOURCE_DIR);
}

// ‖got − ref‖ / ‖ref‖ (NaN anywhere: infinity).
inline double relative_error(const std::vector<float>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - ref[i]) * (got[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

inline double relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  return relative_error(got, std::vector<double>(ref.begin(), ref.end()));
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace tq::test
