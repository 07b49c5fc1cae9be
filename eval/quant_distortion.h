// `tqserve eval quant`: TurboQuant's distortion on random unit vectors, next to the paper's
// figures. For each d and b:
//   mse          E||x - x_hat||^2 of the MSE quantizer (stored scale = the norm, the paper's
//                estimator), x uniform on the unit sphere
//   mse_norm_corrected   the same with the cache's default norm-corrected scale
//   paper_mse    the paper's D_mse (0.36, 0.117, 0.03, 0.009 for b = 1..4)
//   lower_bound  4^-b, the information-theoretic bound
//   ip_error     E(<y, x> - <y, x_hat>)^2 for y independent and uniform on the sphere
//   ip_bias      E[<y, x_hat> / <y, x>] style bias as the least-squares slope of <y,x_hat> on <y,x>
//   ip_error_prod, ip_bias_prod   the same for TurboQuant_prod ((b-1)-bit MSE + 1-bit QJL)
//   paper_ip_prod  the paper's D_prod for Q_prod (1.57, 0.56, 0.18, 0.047 over d)
#pragma once
#include <cstdint>
#include <vector>

#include "quant/codebook.h"
#include "quant/rotation.h"

namespace tq {

struct QuantDistortionRow {
  int d = 0, bits = 0;
  double mse = 0, mse_norm_corrected = 0, paper_mse = 0, lower_bound = 0;
  double ip_error = 0, ip_bias = 0, ip_error_prod = 0, ip_bias_prod = 0, paper_ip_prod = 0;
};

struct QuantDistortionOptions {
  std::vector<int> dims{64, 128};
  std::vector<int> bits{1, 2, 3, 4};
  int samples = 20000;
  uint64_t seed = 1;
  CodebookKind codebook = CodebookKind::beta;
  RotationKind rotation = RotationKind::dense;
};

std::vector<QuantDistortionRow> measure_quant_distortion(const QuantDistortionOptions& o);

}  // namespace tq
