// Lloyd-Max solver for the TurboQuant coordinate laws (see codebook.h).
//
// Everything is done in the standardized variable s = t * sqrt(d), in double precision:
//   gaussian: density exp(-s^2 / 2)                      (N(0,1); t = s / sqrt(d) is N(0, 1/d))
//   beta:     density (1 - s^2/d)^((d-3)/2), |s| < sqrt(d) (the exact marginal, rescaled)
// so that both laws have unit-order spread whatever d is, a single absolute tolerance means the
// same thing for every d, and the gaussian tables for different d differ only by the final
// 1/sqrt(d) factor. Both laws are symmetric, so the solver works on the positive half only and
// mirrors it: the result is exactly antisymmetric and the middle boundary is exactly 0.
#include "quant/codebook.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include "errors/error.h"

namespace tq {
namespace {

// Beyond |s| = 14 the gaussian tail mass is ~1e-44 and the beta tail smaller still (it is
// lighter-tailed for d >= 3 once |s| is large), far below the 1e-10 target: truncating there keeps
// every quadrature interval finite without a change of variables.
constexpr double kTailCut = 14.0;
// Lloyd stops when no level moves by more than this (s units). Lloyd converges linearly; with the
// contraction factors seen here (< 0.99) a step of 1e-13 leaves the levels within ~1e-11 of the
// fixed point, inside the required 1e-10.
constexpr double kStepTol = 1e-13;
constexpr int kMaxIterations = 200000;
// Absolute tolerance of the adaptive quadrature per subdivision test; densities are O(1).
constexpr double kQuadTol = 1e-15;
constexpr int kMaxQuadDepth = 48;

// 16-point Gauss-Legendre rule on [-1, 1], computed once by Newton's method on P_16 (exact to
// double precision; computing it keeps the file free of long tables of magic numbers).
constexpr int kGaussPoints = 16;
struct GaussRule {
  std::array<double, kGaussPoints> x{}, w{};
  GaussRule() {
    const int n = kGaussPoints;
    for (int i = 0; i < n; ++i) {
      double z = std::cos(std::numbers::pi * (i + 0.75) / (n + 0.5));
      double dp = 0.0;
      for (int it = 0; it < 100; ++it) {
        double p0 = 1.0, p1 = z;  // Legendre recurrence up to P_n
        for (int k = 2; k <= n; ++k) {
          const double p2 = ((2.0 * k - 1.0) * z * p1 - (k - 1.0) * p0) / k;
          p0 = p1;
          p1 = p2;
        }
        dp = n * (z * p1 - p0) / (z * z - 1.0);
        const double dz = p1 / dp;
        z -= dz;
        if (std::abs(dz) < 1e-16) break;
      }
      x[i] = z;
      w[i] = 2.0 / ((1.0 - z * z) * dp * dp);
    }
  }
};
const GaussRule& gauss_rule() {
  static const GaussRule rule;
  return rule;
}

using Moments = std::array<double, 3>;

Moments operator+(const Moments& a, const Moments& b) { return {a[0] + b[0], a[1] + b[1], a[2] + b[2]}; }

// Unnormalized density in s units and the right end of its (truncated) support.
struct Law {
  CodebookKind kind;
  double d;
  double alpha;  // beta exponent (d - 3) / 2
  double support;

  Law(CodebookKind k, int dim)
      : kind(k), d(dim), alpha((dim - 3) / 2.0),
        support(k == CodebookKind::beta ? std::min(std::sqrt(double(dim)), kTailCut) : kTailCut) {}

  double operator()(double s) const {
    if (kind == CodebookKind::gaussian) return std::exp(-0.5 * s * s);
    const double r = s * s / d;
    if (r >= 1.0) return 0.0;
    if (alpha == 0.0) return 1.0;  // d = 3: uniform (and avoids 0 * log(0) at the edge)
    return std::exp(alpha * std::log1p(-r));  // log1p keeps precision for small s^2/d
  }
};

// Fixed-rule integral over [a, b] of f(s) for an f returning several integrands at once.
template <typename F>
Moments gauss_legendre(const F& f, double a, double b) {
  const GaussRule& g = gauss_rule();
  const double half = 0.5 * (b - a), mid = 0.5 * (a + b);
  Moments acc{0, 0, 0};
  for (int i = 0; i < kGaussPoints; ++i) {
    const Moments v = f(mid + half * g.x[i]);
    for (int k = 0; k < 3; ++k) acc[k] += g.w[i] * v[k];
  }
  for (double& v : acc) v *= half;
  return acc;
}

// Adaptive bisection: accept the two halves when they agree with the whole. The 16-point rule is
// exact for polynomials of degree 31, so smooth pieces are accepted at once; only the beta
// law's non-smooth edge (small d) recurses deeply, and the depth cap bounds it.
template <typename F>
Moments adaptive(const F& f, double a, double b, const Moments& whole, int depth) {
  const double m = 0.5 * (a + b);
  const Moments left = gauss_legendre(f, a, m), right = gauss_legendre(f, m, b);
  const Moments sum = left + right;
  bool ok = depth >= kMaxQuadDepth;
  if (!ok) {
    ok = true;
    for (int k = 0; k < 3; ++k) ok = ok && std::abs(sum[k] - whole[k]) <= kQuadTol;
  }
  if (ok) return sum;
  return adaptive(f, a, m, left, depth + 1) + adaptive(f, m, b, right, depth + 1);
}

template <typename F>
Moments integrate(const F& f, double a, double b) {
  if (!(b > a)) return {0, 0, 0};
  return adaptive(f, a, b, gauss_legendre(f, a, b), 0);
}

// Mass, first and second moment of the (unnormalized) law over [a, b].
Moments cell_moments(const Law& law, double a, double b) {
  return integrate(
      [&](double s) {
        const double p = law(s);
        return Moments{p, p * s, p * s * s};
      },
      a, b);
}

// Initial positive boundaries at the quantiles k/L (k > L/2) of the law, found by bisection on
// the CDF: a fixed, distribution-aware start, so the iteration is deterministic and short.
std::vector<double> quantile_boundaries(const Law& law, int half, double half_mass) {
  const int levels = 2 * half;
  std::vector<double> q(half + 1);
  q[0] = 0.0;
  q[half] = law.support;
  for (int k = 1; k < half; ++k) {
    // CDF(x) - 1/2 = mass(0, x) / total; target (half + k) / L - 1/2 = k / L.
    const double target = 2.0 * half_mass * k / levels;
    double lo = q[k - 1], hi = law.support;
    for (int it = 0; it < 200 && hi - lo > 1e-15; ++it) {
      const double mid = 0.5 * (lo + hi);
      (cell_moments(law, 0.0, mid)[0] < target ? lo : hi) = mid;
    }
    q[k] = 0.5 * (lo + hi);
  }
  return q;
}

}  // namespace

CodebookKind parse_codebook_kind(std::string_view name) {
  if (name == "gaussian") return CodebookKind::gaussian;
  if (name == "beta") return CodebookKind::beta;
  fail("unknown TurboQuant codebook '{}': valid choices are gaussian, beta", name);
}

std::string_view codebook_kind_name(CodebookKind kind) {
  return kind == CodebookKind::beta ? "beta" : "gaussian";
}

int Codebook::index_of(float v) const {
  int idx = 0;
  for (float b : boundaries) idx += (b <= v) ? 1 : 0;
  return idx;
}

namespace {
std::vector<double> lloyd_max_levels(CodebookKind kind, int dim, int bits, double* mse, int* iterations);
}

std::vector<double> lloyd_max_standardized(CodebookKind kind, int dim, int bits, double* mse,
                                           int* iterations) {
  if (bits < 1 || bits > 4) fail("TurboQuant codebook bits must be 1..4, got {}", bits);
  return lloyd_max_levels(kind, dim, bits, mse, iterations);
}

Codebook make_standard_gaussian_codebook(int bits) {
  if (bits < 1 || bits > kMaxChannelBits) fail("channel-bit codebook bits must be 1..{}, got {}", kMaxChannelBits, bits);
  Codebook cb;
  cb.kind = CodebookKind::gaussian;
  cb.dim = 1;
  cb.bits = bits;
  double mse = 0.0;
  const std::vector<double> s = lloyd_max_levels(CodebookKind::gaussian, 3, bits, &mse, &cb.iterations);
  cb.centroids.assign(s.begin(), s.end());
  cb.boundaries.resize(s.size() - 1);
  for (size_t i = 0; i + 1 < s.size(); ++i) cb.boundaries[i] = 0.5f * (cb.centroids[i] + cb.centroids[i + 1]);
  cb.mse_per_coord = mse;
  return cb;
}

namespace {
std::vector<double> lloyd_max_levels(CodebookKind kind, int dim, int bits, double* mse, int* iterations) {
  if (dim < 3) fail("TurboQuant codebook dimension must be >= 3, got {}", dim);
  const Law law(kind, dim);
  const int half = 1 << (bits - 1);
  // Normalizing constant, numerically: the mass of the positive half.
  const double half_mass = cell_moments(law, 0.0, law.support)[0];

  // q: boundaries of the positive cells (q[0] = 0, q[half] = support); c: their levels.
  std::vector<double> q = quantile_boundaries(law, half, half_mass);
  std::vector<double> c(half);
  int it = 0;
  for (;; ++it) {
    if (it >= kMaxIterations) {
      fail("TurboQuant {} codebook (d={}, bits={}) did not converge in {} Lloyd iterations",
           codebook_kind_name(kind), dim, bits, kMaxIterations);
    }
    double step = 0.0;
    for (int k = 0; k < half; ++k) {
      const Moments m = cell_moments(law, q[k], q[k + 1]);
      const double next = m[1] / m[0];  // centroid condition: conditional mean of the cell
      if (it > 0) step = std::max(step, std::abs(next - c[k]));
      c[k] = next;
    }
    for (int k = 1; k < half; ++k) q[k] = 0.5 * (c[k - 1] + c[k]);  // nearest-neighbour
    if (it > 0 && step < kStepTol) break;
  }

  // Distortion integrated directly as (s - c)^2 (not m2 - 2 c m1 + c^2 m0) to avoid cancellation.
  double err = 0.0;
  for (int k = 0; k < half; ++k) {
    const double ck = c[k];
    err += integrate(
        [&](double s) {
          const double e = s - ck;
          return Moments{law(s) * e * e, 0.0, 0.0};
        },
        q[k], q[k + 1])[0];
  }
  if (mse) *mse = err / half_mass;  // two halves over twice the half mass
  if (iterations) *iterations = it + 1;

  std::vector<double> levels(2 * half);
  for (int k = 0; k < half; ++k) {
    levels[half + k] = c[k];
    levels[half - 1 - k] = -c[k];
  }
  return levels;
}
}  // namespace

Codebook make_codebook(CodebookKind kind, int dim, int bits) {
  Codebook cb;
  cb.kind = kind;
  cb.dim = dim;
  cb.bits = bits;
  double mse_s = 0.0;
  const std::vector<double> s = lloyd_max_standardized(kind, dim, bits, &mse_s, &cb.iterations);
  const double inv = 1.0 / std::sqrt(double(dim));
  cb.centroids.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) cb.centroids[i] = static_cast<float>(s[i] * inv);
  // Midpoints of the stored fp32 levels, in fp32: anyone holding the centroids (a kernel, another
  // implementation) rebuilds bit-identical boundaries, and index_of picks the nearest stored level.
  cb.boundaries.resize(s.size() - 1);
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    cb.boundaries[i] = 0.5f * (cb.centroids[i] + cb.centroids[i + 1]);
  }
  cb.mse_per_coord = mse_s / dim;
  return cb;
}

Codebook snapped_to_int8_grid(Codebook cb) {
  float top = 0;
  for (float c : cb.centroids) top = std::max(top, std::fabs(c));
  if (!(top > 0)) return cb;
  const float step = top / 127.0f;
  for (float& c : cb.centroids) c = std::nearbyint(c / step) * step;  // stays antisymmetric
  for (size_t i = 0; i + 1 < cb.centroids.size(); ++i) cb.boundaries[i] = 0.5f * (cb.centroids[i] + cb.centroids[i + 1]);
  return cb;
}

}  // namespace tq
