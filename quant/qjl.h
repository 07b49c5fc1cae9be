// QJL, the 1-bit quantized Johnson-Lindenstrauss sketch TurboQuant_prod adds to a (b-1)-bit MSE
// quantizer: for a residual r, store sign(S r) and gamma = ||r|| (S: d x d, iid N(0, 1)); then
//   <y, r> ~ sqrt(pi/2) / d * gamma * <S y, sign(S r)>
// is an unbiased estimate of the inner product (the paper's Q_prod). Used by `tqserve eval quant`
// to measure whether its unbiasedness is worth its variance; the cache keeps the MSE quantizer.
#pragma once
#include <cstdint>
#include <vector>

namespace tq {

class QjlSketch {
 public:
  QjlSketch(int dim, uint64_t seed);
  int dim() const { return d_; }
  // signs[i] = sign((S r)_i) as +-1.
  void encode(const float* r, float* signs) const;
  // x_qjl = sqrt(pi/2) / d * gamma * S^T signs, the sketch's reconstruction of r.
  void decode(const float* signs, float gamma, float* out) const;

 private:
  int d_;
  std::vector<float> s_;  // [d, d] row-major
};

}  // namespace tq
