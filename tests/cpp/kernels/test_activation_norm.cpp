// kernels/activation.h and kernels/norm.h: the SIMD SwiGLU gate and RMSNorm equal their
// one-at-a-time references bit for bit (the gate's is the C library's expf, whose bits the vector
// expf reproduces), and both stay within float rounding of a long-double computation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/activation.h"
#include "kernels/norm.h"

namespace tq {
namespace {

std::vector<float> randn(size_t n, float sigma, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not see an empty vector's null data() (UBSan reports it).
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(SiluMul, EqualsReferenceBitForBitAndLongDouble) {
  std::mt19937 rng(5);
  for (int64_t n : {0, 1, 15, 16, 17, 100, 4096 + 5, 70000}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    auto gate = randn(n, 4.0f, rng);
    const auto up = randn(n, 1.0f, rng);
    // The clamp's edges and beyond, zeros of both signs, a subnormal.
    const float edges[] = {0.0f, -0.0f, 87.9f, -87.9f, 88.0f, -88.0f, 90.0f, -90.0f, 200.0f, -200.0f, 1e-40f, -1e-3f};
    for (size_t i = 0; i < std::size(edges) && i < gate.size(); ++i) gate[i * 7 % gate.size()] = edges[i];
    std::vector<float> fast(n), ref(n);
    silu_mul(gate.data(), up.data(), n, fast.data());
    silu_mul_reference(gate.data(), up.data(), n, ref.data());
    EXPECT_TRUE(same_bits(fast, ref));
    for (int64_t i = 0; i < n; ++i) {
      const long double g = gate[i], want = g / (1.0L + std::exp(-g)) * up[i];
      const long double tolerance = 4e-7L * std::fabs(want) + 1e-30L;
      ASSERT_LE(std::fabs(static_cast<long double>(ref[i]) - want), tolerance) << "gate " << gate[i] << " up " << up[i];
    }
  }
}

// The vector expf against the C library's on every 257th bit pattern with |x| < 88 (8.7e6 values;
// every one of the 2.24e9 matched when checked exhaustively), and NaN, infinities and the edges.
TEST(SiluMul, VectorExpfEqualsTheCLibrarys) {
  if (!silu_mul_simd_available()) GTEST_SKIP() << "no AVX-512: silu_mul calls std::exp itself";
  std::vector<float> x;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 257) {
    float f;
    const uint32_t b = static_cast<uint32_t>(bits);
    std::memcpy(&f, &b, sizeof f);
    if (std::fabs(f) < 88.0f) x.push_back(f);
  }
  // The only two floats whose result changes when r = x * N/ln2 - k is not one fused operation
  // (found by the exhaustive check): the test must see such a slip. In a 16-float group of their
  // own, since a group with a lane outside |x| < 88 goes to std::exp whole.
  while (x.size() % 16 != 0) x.push_back(0.5f);
  x.push_back(0x1.04845ep+5f);
  x.push_back(-0x1.f8cbb2p+5f);
  while (x.size() % 16 != 0) x.push_back(0.5f);
  for (float f : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), 88.0f, -88.0f, 87.99999f, -87.99999f, -103.9f})
    x.push_back(f);
  while (x.size() % 16 != 0) x.push_back(0.5f);
  std::vector<float> got(x.size());
  expf_simd(x.data(), int64_t(x.size()), got.data());
  int64_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i]);
    if (!std::isnan(want) && std::memcmp(&got[i], &want, sizeof(float)) != 0 && ++differ <= 5)
      ADD_FAILURE() << "x = " << x[i] << ": " << got[i] << " against " << want;
  }
  EXPECT_EQ(differ, 0);
}

TEST(SiluMul, InPlace) {
  std::mt19937 rng(6);
  const auto gate = randn(1000, 3.0f, rng), up = randn(1000, 1.0f, rng);
  std::vector<float> ref(gate.size()), inplace = gate;
  silu_mul_reference(gate.data(), up.data(), int64_t(gate.size()), ref.data());
  silu_mul(inplace.data(), up.data(), int64_t(inplace.size()), inplace.data());
  EXPECT_TRUE(same_bits(inplace, ref));
}

// The sums of squares themselves, bit for bit, on rows whose values span 2^-20 .. 2^20 (where the
// order of additions shows in the double's last bits: a plain running sum differs on some rows,
// so the test sees an order that is not the documented one).
TEST(RmsNorm, SumOfSquaresInTheDocumentedOrder) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<int> exponent(-20, 20);
  int running_sum_differs = 0;
  for (int64_t d : {1, 15, 16, 17, 128, 2048, 2049}) {
    for (int row = 0; row < 20; ++row) {
      auto x = randn(d, 1.0f, rng);
      for (float& v : x) v = std::ldexp(v, exponent(rng));
      const double simd = rms_sum_of_squares(x.data(), d), ref = rms_sum_of_squares_reference(x.data(), d);
      ASSERT_EQ(std::memcmp(&simd, &ref, sizeof simd), 0) << "d=" << d;
      double running = 0;
      for (float v : x) running += static_cast<double>(v) * v;
      running_sum_differs += running != ref;
    }
  }
  EXPECT_GT(running_sum_differs, 0);
}

TEST(RmsNorm, EqualsReferenceBitForBitAndLongDouble) {
  std::mt19937 rng(7);
  for (int64_t d : {1, 7, 16, 17, 64, 128, 2048, 2049}) {
    for (int64_t n : {1, 3, 40}) {
      SCOPED_TRACE(testing::Message() << "n=" << n << " d=" << d);
      const auto x = randn(n * d, 3.0f, rng), w = randn(d, 1.0f, rng);
      std::vector<float> fast(n * d), ref(n * d), inplace = x;
      rms_norm(x.data(), w.data(), n, d, 1e-6f, fast.data());
      rms_norm_reference(x.data(), w.data(), n, d, 1e-6f, ref.data());
      rms_norm(inplace.data(), w.data(), n, d, 1e-6f, inplace.data());
      EXPECT_TRUE(same_bits(fast, ref));
      EXPECT_TRUE(same_bits(inplace, ref));
      for (int64_t t = 0; t < n; ++t) {
        long double sum = 0;
        for (int64_t i = 0; i < d; ++i) sum += static_cast<long double>(x[t * d + i]) * x[t * d + i];
        const long double inv = 1.0L / std::sqrt(sum / d + 1e-6L);
        for (int64_t i = 0; i < d; ++i) {
          const long double want = x[t * d + i] * inv * w[i];
          ASSERT_LE(std::fabs(static_cast<long double>(ref[t * d + i]) - want), 1e-6L * std::fabs(want) + 1e-30L);
        }
      }
    }
  }
}

}  // namespace
}  // namespace tq
