// Mean relative squared error of a KV row codec on random normal rows (the same rows for every
// codec with the same seed), for tests comparing row formats of the same bytes.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "kv/kv_row_codec.h"

namespace tq::row_error_test {

// mean over `rows` rows x ~ N(0, I_d) of ||x - decode(encode(x))||^2 / ||x||^2, head 0.
inline double mean_relative_row_error(const KvRowCodec& codec, int rows, uint32_t seed) {
  const int d = codec.head_dim();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> row(codec.row_bytes());
  std::vector<float> x(d), xhat(d);
  double total = 0;
  for (int r = 0; r < rows; ++r) {
    double n2 = 0;
    for (float& v : x) v = normal(rng), n2 += double(v) * v;
    codec.encode(x.data(), 0, row.data());
    codec.decode(row.data(), 0, xhat.data());
    double e = 0;
    for (int j = 0; j < d; ++j) e += double(x[j] - xhat[j]) * (x[j] - xhat[j]);
    total += e / n2;
  }
  return total / rows;
}

}  // namespace tq::row_error_test
