// The AVX-512 dense rotations give the scalar order's results bit for bit, in place or not, for
// every head_dim they take; the scalar order itself is checked against double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dense_rotation.h"

namespace tq {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& e : v) e = dist(rng);
  return v;
}

std::vector<float> transpose(const std::vector<float>& m, int n) {
  std::vector<float> t(m.size());
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) t[size_t(j) * n + i] = m[size_t(i) * n + j];
  return t;
}

TEST(DenseRotation, ScalarOrderMatchesDoublePrecision) {
  const int n = 72;  // not a multiple of 16: the scalar tail of the 8 partial sums
  const std::vector<float> r = random_values(size_t(n) * n, 1), x = random_values(n, 2);
  std::vector<float> y(n), xt(n);
  rotate_dense_scalar(r.data(), x.data(), y.data(), n);
  rotate_dense_transpose_scalar(r.data(), x.data(), xt.data(), n);
  for (int i = 0; i < n; ++i) {
    double ref = 0, ref_t = 0;
    for (int j = 0; j < n; ++j) {
      ref += double(r[size_t(i) * n + j]) * x[j];
      ref_t += double(r[size_t(j) * n + i]) * x[j];
    }
    EXPECT_NEAR(y[i], ref, 1e-4) << i;
    EXPECT_NEAR(xt[i], ref_t, 1e-4) << i;
  }
}

TEST(DenseRotation, Avx512IsBitIdenticalToScalar) {
  if (!dense_rotation_avx512_available(64)) GTEST_SKIP() << "this CPU has no AVX-512F";
  EXPECT_FALSE(dense_rotation_avx512_available(72));
  EXPECT_FALSE(dense_rotation_avx512_available(1024));
  for (int n : {16, 48, 64, 80, 96, 128, 192, 256, 512}) {
    ASSERT_TRUE(dense_rotation_avx512_available(n)) << n;
    const std::vector<float> r = random_values(size_t(n) * n, 10 + n), rt = transpose(r, n);
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<float> x = random_values(n, 100 * n + trial);
      if (trial == 2) x[n / 3] = -0.0f;
      std::vector<float> want(n), got(n), want_t(n), got_t(n);
      rotate_dense_scalar(r.data(), x.data(), want.data(), n);
      rotate_dense_avx512(rt.data(), x.data(), got.data(), n);
      rotate_dense_transpose_scalar(r.data(), x.data(), want_t.data(), n);
      rotate_dense_transpose_avx512(r.data(), x.data(), got_t.data(), n);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), sizeof(float) * n)) << "R x, dim " << n;
      EXPECT_EQ(0, std::memcmp(want_t.data(), got_t.data(), sizeof(float) * n)) << "R^T y, dim " << n;
      std::vector<float> in_place = x;  // output over the input
      rotate_dense_avx512(rt.data(), in_place.data(), in_place.data(), n);
      EXPECT_EQ(0, std::memcmp(want.data(), in_place.data(), sizeof(float) * n)) << "in place, dim " << n;
      in_place = x;
      rotate_dense_transpose_avx512(r.data(), in_place.data(), in_place.data(), n);
      EXPECT_EQ(0, std::memcmp(want_t.data(), in_place.data(), sizeof(float) * n)) << "in place, dim " << n;
    }
  }
}

}  // namespace
}  // namespace tq
