// Random rotations for TurboQuant; the construction is documented in rotation.h.
#include "quant/rotation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "errors/error.h"
#include "kernels/dense_rotation.h"

namespace tq {
namespace {

// Vigna's splitmix64: a bijective 64-bit mixer, used only to turn (seed, layer) into a seed.
uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in (0, 1]: the top 53 bits plus one ulp, so log(u) is always finite.
double uniform_open0(std::mt19937_64& rng) {
  return static_cast<double>((rng() >> 11) + 1) * 0x1.0p-53;
}

// Box-Muller written out (std::normal_distribution's algorithm is implementation-defined).
class Normals {
 public:
  explicit Normals(std::mt19937_64& rng) : rng_(rng) {}
  double next() {
    if (have_spare_) {
      have_spare_ = false;
      return spare_;
    }
    const double u1 = uniform_open0(rng_), u2 = uniform_open0(rng_);
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 2.0 * std::numbers::pi * u2;
    spare_ = r * std::sin(a);
    have_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::mt19937_64& rng_;
  double spare_ = 0.0;
  bool have_spare_ = false;
};

bool is_power_of_two(int n) { return n > 0 && (n & (n - 1)) == 0; }

// Q of the Householder QR of G (row-major n x n, double), with column j of Q multiplied by
// sign(R[j][j]) so that diag(R) > 0. Householder keeps Q orthogonal to ~1e-15 regardless of the
// conditioning of G (Gram-Schmidt would not).
std::vector<double> orthogonal_factor(std::vector<double> a, int n) {
  auto at = [&](int i, int j) -> double& { return a[size_t(i) * n + j]; };
  std::vector<std::vector<double>> vs(n);
  std::vector<double> rdiag(n);
  for (int k = 0; k < n; ++k) {
    double norm2 = 0.0;
    for (int i = k; i < n; ++i) norm2 += at(i, k) * at(i, k);
    const double norm = std::sqrt(norm2);
    const double x0 = at(k, k);
    // Reflect x onto alpha e1 with alpha of opposite sign to x0 (no cancellation in v0).
    const double alpha = x0 >= 0.0 ? -norm : norm;
    std::vector<double> v(n - k);
    for (int i = k; i < n; ++i) v[i - k] = at(i, k);
    v[0] -= alpha;
    double vnorm2 = 0.0;
    for (double e : v) vnorm2 += e * e;
    rdiag[k] = alpha;
    if (vnorm2 > 0.0) {
      const double inv = 1.0 / std::sqrt(vnorm2);
      for (double& e : v) e *= inv;
      // A[k:, k:] -= 2 v (v^T A[k:, k:])
      for (int j = k; j < n; ++j) {
        double dot = 0.0;
        for (int i = k; i < n; ++i) dot += v[i - k] * at(i, j);
        for (int i = k; i < n; ++i) at(i, j) -= 2.0 * v[i - k] * dot;
      }
    } else {
      v.assign(n - k, 0.0);  // x is already alpha e1: identity reflector
    }
    vs[k] = std::move(v);
  }
  // Q = H_0 H_1 ... H_{n-1} I, accumulated from the right.
  std::vector<double> q(size_t(n) * n, 0.0);
  for (int i = 0; i < n; ++i) q[size_t(i) * n + i] = 1.0;
  for (int k = n - 1; k >= 0; --k) {
    const std::vector<double>& v = vs[k];
    for (int j = 0; j < n; ++j) {
      double dot = 0.0;
      for (int i = k; i < n; ++i) dot += v[i - k] * q[size_t(i) * n + j];
      for (int i = k; i < n; ++i) q[size_t(i) * n + j] -= 2.0 * v[i - k] * dot;
    }
  }
  // G = Q R; flipping column j of Q and row j of R keeps the product and makes R[j][j] > 0.
  for (int j = 0; j < n; ++j) {
    if (rdiag[j] < 0.0) {
      for (int i = 0; i < n; ++i) q[size_t(i) * n + j] = -q[size_t(i) * n + j];
    }
  }
  return q;
}

// The row-major transpose of a row-major n x n matrix.
std::vector<float> transposed(const std::vector<float>& m, int n) {
  std::vector<float> t(m.size());
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) t[size_t(j) * n + i] = m[size_t(i) * n + j];
  return t;
}

}  // namespace

RotationKind parse_rotation_kind(std::string_view name) {
  if (name == "dense") return RotationKind::dense;
  if (name == "hadamard") return RotationKind::hadamard;
  fail("unknown TurboQuant rotation '{}': valid choices are dense, hadamard", name);
}

std::string_view rotation_kind_name(RotationKind kind) {
  switch (kind) {
    case RotationKind::dense: return "dense";
    case RotationKind::hadamard: return "hadamard";
    case RotationKind::matrix: return "matrix";
  }
  return "?";
}

uint64_t rotation_stream_seed(uint64_t seed, int layer) {
  return splitmix64(splitmix64(seed) ^ splitmix64(0x5451524F54000000ull + uint64_t(layer)));
}

void fwht_inplace(float* v, int n) {
  for (int h = 1; h < n; h <<= 1) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
}

Rotation Rotation::make(RotationKind kind, int dim, uint64_t seed, int layer) {
  if (dim < 1) fail("TurboQuant rotation dimension must be positive, got {}", dim);
  if (layer < 0) fail("TurboQuant rotation layer must be >= 0, got {}", layer);
  std::mt19937_64 rng(rotation_stream_seed(seed, layer));
  Rotation r;
  r.kind_ = kind;
  r.dim_ = dim;
  if (kind == RotationKind::hadamard) {
    if (!is_power_of_two(dim)) {
      int lo = 1;
      while (lo * 2 <= dim) lo *= 2;
      fail("TurboQuant hadamard rotation needs head_dim to be a power of two (e.g. 64, 128, 256); "
           "got {} (nearest valid: {} or {}); use --tq-rotation dense for this model",
           dim, lo, lo * 2);
    }
    r.signs_.resize(dim);
    for (int j = 0; j < dim; ++j) r.signs_[j] = (rng() >> 63) ? -1.0f : 1.0f;
    return r;
  }
  if (kind != RotationKind::dense) {
    fail("Rotation::make builds dense or hadamard rotations; use from_matrix for explicit ones");
  }
  std::vector<double> g(size_t(dim) * dim);
  Normals normals(rng);
  for (double& e : g) e = normals.next();
  const std::vector<double> q = orthogonal_factor(std::move(g), dim);
  r.matrix_.resize(q.size());
  for (size_t i = 0; i < q.size(); ++i) r.matrix_[i] = static_cast<float>(q[i]);
  r.matrix_t_ = transposed(r.matrix_, dim);
  return r;
}

Rotation Rotation::from_matrix(int dim, std::vector<float> row_major) {
  if (dim < 1) fail("TurboQuant rotation dimension must be positive, got {}", dim);
  if (row_major.size() != size_t(dim) * dim) {
    fail("TurboQuant rotation matrix for d={} needs {} values, got {}", dim, size_t(dim) * dim,
         row_major.size());
  }
  Rotation r;
  r.kind_ = RotationKind::matrix;
  r.dim_ = dim;
  r.matrix_ = std::move(row_major);
  r.matrix_t_ = transposed(r.matrix_, dim);
  return r;
}

void Rotation::apply(const float* x, float* y) const {
  const int n = dim_;
  if (kind_ == RotationKind::hadamard) {
    const float inv = 1.0f / std::sqrt(static_cast<float>(n));
    for (int j = 0; j < n; ++j) y[j] = signs_[j] * x[j];
    fwht_inplace(y, n);
    for (int j = 0; j < n; ++j) y[j] *= inv;
    return;
  }
  if (dense_rotation_avx512_available(n)) {
    rotate_dense_avx512(matrix_t_.data(), x, y, n);
  } else {
    rotate_dense_scalar(matrix_.data(), x, y, n);
  }
}

void Rotation::apply_transpose(const float* y, float* x) const {
  const int n = dim_;
  if (kind_ == RotationKind::hadamard) {
    // R^T = diag(s) H / sqrt(d), since H is symmetric.
    const float inv = 1.0f / std::sqrt(static_cast<float>(n));
    if (x != y) std::memcpy(x, y, sizeof(float) * n);
    fwht_inplace(x, n);
    for (int j = 0; j < n; ++j) x[j] *= signs_[j] * inv;
    return;
  }
  if (dense_rotation_avx512_available(n)) {
    rotate_dense_transpose_avx512(matrix_.data(), y, x, n);
  } else {
    rotate_dense_transpose_scalar(matrix_.data(), y, x, n);
  }
}

std::vector<float> Rotation::to_matrix() const {
  if (kind_ != RotationKind::hadamard) return matrix_;
  // Column j of R is R e_j.
  const int n = dim_;
  std::vector<float> m(size_t(n) * n), e(n);
  for (int j = 0; j < n; ++j) {
    std::fill(e.begin(), e.end(), 0.0f);
    e[j] = 1.0f;
    apply(e.data(), e.data());
    for (int i = 0; i < n; ++i) m[size_t(i) * n + j] = e[i];
  }
  return m;
}

}  // namespace tq
