#include "quant/qjl.h"

#include <cmath>
#include <random>

namespace tq {

QjlSketch::QjlSketch(int dim, uint64_t seed) : d_(dim), s_(size_t(dim) * dim) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : s_) v = normal(rng);
}

void QjlSketch::encode(const float* r, float* signs) const {
  for (int i = 0; i < d_; ++i) {
    double dot = 0;
    for (int j = 0; j < d_; ++j) dot += double(s_[size_t(i) * d_ + j]) * r[j];
    signs[i] = dot >= 0 ? 1.0f : -1.0f;
  }
}

void QjlSketch::decode(const float* signs, float gamma, float* out) const {
  const double k = std::sqrt(M_PI / 2) / d_ * gamma;
  for (int j = 0; j < d_; ++j) out[j] = 0;
  for (int i = 0; i < d_; ++i)
    for (int j = 0; j < d_; ++j) out[j] += s_[size_t(i) * d_ + j] * signs[i];
  for (int j = 0; j < d_; ++j) out[j] = static_cast<float>(out[j] * k);
}

}  // namespace tq
