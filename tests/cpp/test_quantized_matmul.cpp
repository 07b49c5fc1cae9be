// The Q4_0 / Q4_1 / Q8_0 linear kernels equal, up to fp32 rounding, the double-precision product
// of the dequantized weights with the dequantized 8-bit activations; activation quantization
// follows ggml's Q8_0/Q8_1 rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dequantize.h"
#include "kernels/quantized_matmul.h"

namespace tq {
namespace {

// Random but valid weight blocks: fp16 scales (and mins) of sane size, random codes.
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t in, std::mt19937& rng) {
  const size_t row_bytes = dtype_row_bytes(t, in);
  std::vector<uint8_t> w(rows * row_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  const int block_bytes = dtype_traits(t).block_bytes;
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  for (size_t off = 0; off < w.size(); off += block_bytes) {
    const uint16_t d = fp32_to_fp16(scale(rng));
    std::memcpy(&w[off], &d, 2);
    if (t == DType::Q4_1) {
      const uint16_t m = fp32_to_fp16(-scale(rng) * 8);
      std::memcpy(&w[off + 2], &m, 2);
    }
  }
  return w;
}

TEST(QuantizeActivations, FollowsGgmlQ8Rules) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = (i - 15.5f) * 0.25f;  // amax 3.875
  ActivationBlock b;
  quantize_activations(x.data(), 32, &b);
  EXPECT_FLOAT_EQ(b.d, fp16_to_fp32(fp32_to_fp16(3.875f / 127.0f)));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[31], 127);
  int sum = 0;
  for (int8_t q : b.qs) sum += q;
  EXPECT_FLOAT_EQ(b.s, fp16_to_fp32(fp32_to_fp16(3.875f / 127.0f * sum)));
  std::vector<float> zeros(32, 0.0f);
  quantize_activations(zeros.data(), 32, &b);
  EXPECT_EQ(b.d, 0.0f);
  for (int8_t q : b.qs) EXPECT_EQ(q, 0);
}

class QuantizedLinearTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantizedLinearTest, EqualsDequantizedProductInDouble) {
  const DType t = GetParam();
  std::mt19937 rng(99);
  const int64_t in = 256, out = 37, n = 3;
  const std::vector<uint8_t> w = random_rows(t, out, in, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * in), bias(out);
  for (float& v : x) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  std::vector<float> y(n * out);
  linear_quantized(x.data(), n, in, t, w.data(), out, bias.data(), y.data());

  const size_t row_bytes = dtype_row_bytes(t, in);
  std::vector<float> w_row(in);
  std::vector<ActivationBlock> act(in / 32);
  for (int64_t r = 0; r < n; ++r) {
    quantize_activations(x.data() + r * in, in, act.data());
    for (int64_t o = 0; o < out; ++o) {
      dequantize_row(t, w.data() + o * row_bytes, w_row.data(), in);
      double ref = bias[o], magnitude = std::fabs(bias[o]);
      for (int64_t i = 0; i < in; ++i) {
        const double a = double{act[i / 32].d} * act[i / 32].qs[i % 32];
        ref += double{w_row[i]} * a;
        magnitude += std::fabs(double{w_row[i]} * a);
      }
      // Q4_1's min term uses the fp16-rounded block sum, as ggml does: allow for that rounding.
      const double tol = 1e-5 * magnitude + (t == DType::Q4_1 ? 2e-3 * magnitude : 0.0);
      EXPECT_NEAR(y[r * out + o], ref, tol) << "row " << r << " out " << o;
    }
  }
}

// The run-time-chosen SIMD kernel and the scalar reference agree bit for bit.
TEST_P(QuantizedLinearTest, SimdEqualsScalarBitForBit) {
  const DType t = GetParam();
  std::mt19937 rng(7);
  const int64_t in = 576, rows = 64;
  const std::vector<uint8_t> w = random_rows(t, rows, in, rng);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(in);
  for (float& v : x) v = normal(rng);
  std::vector<ActivationBlock> act(in / 32);
  quantize_activations(x.data(), in, act.data());
  const size_t row_bytes = dtype_row_bytes(t, in);
  for (int64_t r = 0; r < rows; ++r) {
    const float simd = dot_quantized_row(t, w.data() + r * row_bytes, act.data(), in / 32, true);
    const float scalar = dot_quantized_row(t, w.data() + r * row_bytes, act.data(), in / 32, false);
    EXPECT_EQ(simd, scalar) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantizedLinearTest, ::testing::Values(DType::Q8_0, DType::Q4_0, DType::Q4_1),
                         [](const auto& info) { return std::string(dtype_traits(info.param).name); });

}  // namespace
}  // namespace tq
