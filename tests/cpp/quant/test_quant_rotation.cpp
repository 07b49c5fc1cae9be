// TurboQuant rotations (quant/rotation.h): orthogonality, inversion, determinism, the documented
// construction (re-derived here from the header's description), and the hadamard d check.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "errors/error.h"
#include "quant/rotation.h"

namespace tq {
namespace {

std::vector<float> random_vector(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = dist(rng);
  return v;
}

double norm(const std::vector<float>& v) {
  double s = 0;
  for (float e : v) s += double(e) * e;
  return std::sqrt(s);
}

// max |R R^T - I| in double from the fp32 matrix.
double orthogonality_error(const std::vector<float>& m, int n) {
  double worst = 0;
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < n; ++k) {
      double dot = 0;
      for (int j = 0; j < n; ++j) dot += double(m[size_t(i) * n + j]) * m[size_t(k) * n + j];
      worst = std::max(worst, std::abs(dot - (i == k ? 1.0 : 0.0)));
    }
  }
  return worst;
}

TEST(QuantRotation, Orthogonal) {
  for (RotationKind kind : {RotationKind::dense, RotationKind::hadamard}) {
    for (int d : {64, 128, 256}) {
      const Rotation r = Rotation::make(kind, d, 42, 3);
      const double err = orthogonality_error(r.to_matrix(), d);
      EXPECT_LT(err, 1e-5) << rotation_kind_name(kind) << " d=" << d;
      std::printf("[ %s d=%d: max |R R^T - I| = %.2e ]\n",
                  std::string(rotation_kind_name(kind)).c_str(), d, err);
    }
  }
  // dense has no power-of-two restriction.
  EXPECT_LT(orthogonality_error(Rotation::make(RotationKind::dense, 96, 7, 0).to_matrix(), 96),
            1e-5);
}

TEST(QuantRotation, ApplyMatchesMatrixAndTransposeInverts) {
  for (RotationKind kind : {RotationKind::dense, RotationKind::hadamard}) {
    for (int d : {64, 128, 256}) {
      const Rotation r = Rotation::make(kind, d, 1234, 0);
      const std::vector<float> m = r.to_matrix();
      const std::vector<float> x = random_vector(d, 99 + d);
      std::vector<float> y(d), back(d);
      r.apply(x.data(), y.data());
      for (int i = 0; i < d; ++i) {
        double want = 0;
        for (int j = 0; j < d; ++j) want += double(m[size_t(i) * d + j]) * x[j];
        EXPECT_NEAR(y[i], want, 1e-5) << i;
      }
      r.apply_transpose(y.data(), back.data());
      for (int j = 0; j < d; ++j) EXPECT_NEAR(back[j], x[j], 1e-5 * norm(x)) << j;
      EXPECT_NEAR(norm(y), norm(x), 1e-5 * norm(x));  // norms preserved

      // In place gives the same answers.
      std::vector<float> z = x;
      r.apply(z.data(), z.data());
      for (int i = 0; i < d; ++i) EXPECT_EQ(z[i], y[i]);
      r.apply_transpose(z.data(), z.data());
      for (int j = 0; j < d; ++j) EXPECT_EQ(z[j], back[j]);
    }
  }
}

TEST(QuantRotation, Deterministic) {
  for (RotationKind kind : {RotationKind::dense, RotationKind::hadamard}) {
    const std::vector<float> a = Rotation::make(kind, 128, 42, 5).to_matrix();
    EXPECT_EQ(a, Rotation::make(kind, 128, 42, 5).to_matrix());  // bit-identical
    EXPECT_NE(a, Rotation::make(kind, 128, 42, 6).to_matrix());  // other layer
    EXPECT_NE(a, Rotation::make(kind, 128, 43, 5).to_matrix());  // other seed
  }
  // The seed mixing is pure integer arithmetic: pin it.
  EXPECT_EQ(rotation_stream_seed(42, 0), rotation_stream_seed(42, 0));
  EXPECT_NE(rotation_stream_seed(42, 0), rotation_stream_seed(42, 1));
  EXPECT_NE(rotation_stream_seed(42, 1), rotation_stream_seed(43, 0));
}

TEST(QuantRotation, DenseFollowsDocumentedConstruction) {
  // Re-derive G from the header's description (mt19937_64 + Box-Muller, row-major) and check that
  // R^T G is upper triangular with a positive diagonal, i.e. R is the sign-fixed Q of QR(G).
  const int d = 64;
  const uint64_t seed = 42;
  const int layer = 2;
  std::mt19937_64 rng(rotation_stream_seed(seed, layer));
  auto uniform = [&] { return double((rng() >> 11) + 1) * 0x1.0p-53; };
  std::vector<double> g;
  while (int(g.size()) < d * d) {
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1)), a = 2.0 * std::numbers::pi * u2;
    g.push_back(r * std::cos(a));
    g.push_back(r * std::sin(a));
  }
  const std::vector<float> q = Rotation::make(RotationKind::dense, d, seed, layer).to_matrix();
  double worst_below = 0, min_diag = 1e9;
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) {
      double rij = 0;  // (Q^T G)[i][j] = sum_k Q[k][i] G[k][j]
      for (int k = 0; k < d; ++k) rij += double(q[size_t(k) * d + i]) * g[size_t(k) * d + j];
      if (i > j) worst_below = std::max(worst_below, std::abs(rij));
      if (i == j) min_diag = std::min(min_diag, rij);
    }
  }
  EXPECT_LT(worst_below, 1e-4);
  EXPECT_GT(min_diag, 0.0);
}

TEST(QuantRotation, HadamardIsDocumentedMatrix) {
  const int d = 128;
  const Rotation r = Rotation::make(RotationKind::hadamard, d, 42, 1);
  const std::vector<float> m = r.to_matrix();
  ASSERT_EQ(int(r.signs().size()), d);
  int negative = 0;
  for (int j = 0; j < d; ++j) negative += r.signs()[j] < 0;
  EXPECT_GT(negative, d / 4);  // random signs, not all one way
  EXPECT_LT(negative, 3 * d / 4);
  const double inv = 1.0 / std::sqrt(double(d));
  for (int i = 0; i < d; ++i) {
    for (int j = 0; j < d; ++j) {
      const double h = (std::popcount(unsigned(i & j)) & 1) ? -1.0 : 1.0;
      EXPECT_NEAR(m[size_t(i) * d + j], h * r.signs()[j] * inv, 1e-6);
    }
  }
  // H H = n I for the unnormalized transform.
  std::vector<float> v = random_vector(64, 5), w = v;
  fwht_inplace(w.data(), 64);
  fwht_inplace(w.data(), 64);
  for (int j = 0; j < 64; ++j) EXPECT_NEAR(w[j], 64.0f * v[j], 1e-4);
}

TEST(QuantRotation, HadamardRejectsNonPowerOfTwo) {
  try {
    Rotation::make(RotationKind::hadamard, 96, 42, 0);
    FAIL() << "expected an error for d=96";
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("[ message: %s ]\n", msg.c_str());
    EXPECT_NE(msg.find("power of two"), std::string::npos) << msg;
    EXPECT_NE(msg.find("96"), std::string::npos) << msg;
    EXPECT_NE(msg.find("64 or 128"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dense"), std::string::npos) << msg;
  }
}

TEST(QuantRotation, ExplicitMatrixAndNames) {
  const std::vector<float> m = Rotation::make(RotationKind::dense, 64, 9, 0).to_matrix();
  const Rotation r = Rotation::from_matrix(64, m);
  EXPECT_EQ(r.kind(), RotationKind::matrix);
  const std::vector<float> x = random_vector(64, 1);
  std::vector<float> a(64), b(64);
  r.apply(x.data(), a.data());
  Rotation::make(RotationKind::dense, 64, 9, 0).apply(x.data(), b.data());
  EXPECT_EQ(a, b);
  EXPECT_THROW(Rotation::from_matrix(64, std::vector<float>(100)), Error);
  EXPECT_EQ(parse_rotation_kind("dense"), RotationKind::dense);
  EXPECT_EQ(parse_rotation_kind("hadamard"), RotationKind::hadamard);
  EXPECT_THROW(parse_rotation_kind("givens"), Error);
  EXPECT_THROW(Rotation::make(RotationKind::dense, 64, 42, -1), Error);
}

}  // namespace
}  // namespace tq
