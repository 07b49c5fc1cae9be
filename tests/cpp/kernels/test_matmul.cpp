// kernels/matmul.h: the fp32 linear layer is batch-invariant (a token's output row has the same
// bits alone or among others, at any position of the batch), the SIMD kernel equals the plain
// reference order bit for bit, and both stay within rounding of a double-precision product.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/matmul.h"

namespace tq {
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

TEST(Linear, SimdEqualsReferenceOrderAndDouble) {
  std::mt19937 rng(11);
  for (int64_t in : {1, 7, 8, 13, 64, 100, 576}) {
    for (int64_t out : {1, 3, 8, 17, 50}) {
      for (int64_t n : {1, 2, 5, 9, 70}) {
        SCOPED_TRACE(testing::Message() << "n=" << n << " in=" << in << " out=" << out);
        const auto x = randn(n * in, rng), w = randn(out * in, rng), b = randn(out, rng);
        std::vector<float> fast(n * out), ref(n * out);
        linear(x.data(), n, in, w.data(), out, b.data(), fast.data());
        linear_reference_order(x.data(), n, in, w.data(), out, b.data(), ref.data());
        ASSERT_EQ(0, std::memcmp(fast.data(), ref.data(), fast.size() * sizeof(float)));
        for (int64_t t = 0; t < n; ++t)
          for (int64_t o = 0; o < out; ++o) {
            double s = b[o], mag = std::fabs(b[o]);
            for (int64_t k = 0; k < in; ++k) {
              s += double(x[t * in + k]) * w[o * in + k];
              mag += std::fabs(double(x[t * in + k]) * w[o * in + k]);
            }
            ASSERT_NEAR(fast[t * out + o], s, 1e-6 * mag + 1e-6);
          }
      }
    }
  }
}

TEST(Linear, ARowIsTheSameAloneOrInAnyBatch) {
  std::mt19937 rng(5);
  const int64_t in = 200, out = 37;
  const auto w = randn(out * in, rng);
  const auto row = randn(in, rng);
  std::vector<float> alone(out);
  linear(row.data(), 1, in, w.data(), out, nullptr, alone.data());
  for (int64_t n : {2, 3, 4, 5, 8, 63, 64, 65, 130}) {
    for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
      auto x = randn(n * in, rng);
      std::copy(row.begin(), row.end(), x.begin() + pos * in);
      std::vector<float> y(n * out);
      linear(x.data(), n, in, w.data(), out, nullptr, y.data());
      ASSERT_EQ(0, std::memcmp(y.data() + pos * out, alone.data(), out * sizeof(float))) << "n=" << n << " pos=" << pos;
    }
  }
}

}  // namespace
}  // namespace tq
