#include "eval/quant_distortion.h"

#include <cmath>
#include <random>

#include "quant/qjl.h"
#include "quant/tq_row.h"

namespace tq {
namespace {

constexpr double kPaperMse[] = {0.36, 0.117, 0.03, 0.009};
constexpr double kPaperProd[] = {1.57, 0.56, 0.18, 0.047};

void random_unit(std::mt19937_64& rng, int d, std::vector<float>& x) {
  std::normal_distribution<double> normal;
  double n2 = 0;
  std::vector<double> g(d);
  for (double& v : g) {
    v = normal(rng);
    n2 += v * v;
  }
  const double inv = 1.0 / std::sqrt(n2);
  for (int j = 0; j < d; ++j) x[j] = static_cast<float>(g[j] * inv);
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t j = 0; j < a.size(); ++j) s += double(a[j]) * b[j];
  return s;
}

// Accumulates the inner-product error and the least-squares slope of estimate on truth.
struct IpStats {
  double err = 0, xy = 0, xx = 0;
  int n = 0;
  void add(double truth, double estimate) {
    err += (truth - estimate) * (truth - estimate);
    xy += truth * estimate;
    xx += truth * truth;
    ++n;
  }
  double mean_error() const { return n ? err / n : 0; }
  double slope() const { return xx > 0 ? xy / xx : 0; }
};

}  // namespace

std::vector<QuantDistortionRow> measure_quant_distortion(const QuantDistortionOptions& o) {
  std::vector<QuantDistortionRow> rows;
  for (int d : o.dims) {
    const Rotation rot = Rotation::make(o.rotation, d, o.seed, 0);
    const QjlSketch qjl(d, o.seed ^ 0x514a4cull);
    for (int b : o.bits) {
      const Codebook cb = make_codebook(o.codebook, d, b);
      const Codebook cb_prod = b > 1 ? make_codebook(o.codebook, d, b - 1) : Codebook{};
      std::mt19937_64 rng(o.seed * 1000003 + d * 16 + b);
      std::vector<float> x(d), y(d), xhat(d), xnc(d), xprod(d), resid(d), signs(d), sketch(d);
      std::vector<uint8_t> row(tq_row_bytes(d, b)), row_prod(b > 1 ? tq_row_bytes(d, b - 1) : 0);
      double mse = 0, mse_nc = 0;
      IpStats ip, ip_prod;
      for (int s = 0; s < o.samples; ++s) {
        random_unit(rng, d, x);
        random_unit(rng, d, y);
        tq_encode_row(x.data(), cb, rot, row.data(), TqScaleMode::plain_norm);
        tq_decode_row(row.data(), cb, rot, xhat.data());
        tq_encode_row(x.data(), cb, rot, row.data(), TqScaleMode::norm_corrected);
        tq_decode_row(row.data(), cb, rot, xnc.data());
        // Q_prod: (b-1)-bit MSE stage (nothing at b = 1), QJL on the residual.
        if (b > 1) {
          tq_encode_row(x.data(), cb_prod, rot, row_prod.data(), TqScaleMode::plain_norm);
          tq_decode_row(row_prod.data(), cb_prod, rot, xprod.data());
        } else {
          std::fill(xprod.begin(), xprod.end(), 0.0f);
        }
        double g2 = 0;
        for (int j = 0; j < d; ++j) g2 += double(resid[j] = x[j] - xprod[j]) * resid[j];
        qjl.encode(resid.data(), signs.data());
        qjl.decode(signs.data(), static_cast<float>(std::sqrt(g2)), sketch.data());
        for (int j = 0; j < d; ++j) xprod[j] += sketch[j];
        for (int j = 0; j < d; ++j) {
          mse += double(x[j] - xhat[j]) * (x[j] - xhat[j]);
          mse_nc += double(x[j] - xnc[j]) * (x[j] - xnc[j]);
        }
        const double truth = dot(y, x);
        ip.add(truth, dot(y, xhat));
        ip_prod.add(truth, dot(y, xprod));
      }
      QuantDistortionRow r;
      r.d = d, r.bits = b;
      r.mse = mse / o.samples;
      r.mse_norm_corrected = mse_nc / o.samples;
      r.paper_mse = b >= 1 && b <= 4 ? kPaperMse[b - 1] : 0;
      r.lower_bound = std::pow(4.0, -b);
      r.ip_error = ip.mean_error();
      r.ip_bias = ip.slope();
      r.ip_error_prod = ip_prod.mean_error();
      r.ip_bias_prod = ip_prod.slope();
      r.paper_ip_prod = b >= 1 && b <= 4 ? kPaperProd[b - 1] / d : 0;
      rows.push_back(r);
    }
  }
  return rows;
}

}  // namespace tq
