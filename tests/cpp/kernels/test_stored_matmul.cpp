// Linear layers over weights as stored (F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K):
// - each equals, up to fp32 rounding, the double-precision product of the weights dequantized by
//   kernels/dequantize (itself checked against the `gguf` package) with the 8-bit activations
//   (fp32 activations for F16/BF16);
// - the SIMD tiles equal the scalar reference bit for bit, for every tile shape;
// - a token's outputs do not depend on the batch it is in;
// - activation quantization follows ggml's Q8_0/Q8_1 rules (Q8_K's for the K-quants);
// - Q4_1, Q8_0, Q4_K and Q6_K rows interleaved 8 or 16 at a time (kernels/interleaved_rows.h) give the same
//   results bit for bit, and come back unchanged; AMX's tiles give the VNNI kernel's results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/dequantize.h"
#include "kernels/interleaved_rows.h"
#include "kernels/stored_matmul.h"
#include "kernels/stored_matmul_amx.h"
#include "kernels/stored_matmul_avx2.h"
#include "kernels/stored_matmul_avx512.h"

namespace tq {
namespace {

void put_f16(std::vector<uint8_t>& w, size_t off, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(&w[off], &h, 2);
}

// Random but valid rows: random bytes, with every fp16 scale (and min) of sane size and, for
// half types, every value a sane number.
std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t in, std::mt19937& rng) {
  const size_t row_bytes = dtype_row_bytes(t, in);
  std::vector<uint8_t> w(rows * row_bytes);
  std::uniform_int_distribution<int> byte(0, 255);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(0.001f, 0.05f);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  if (t == DType::F16 || t == DType::BF16) {
    for (size_t off = 0; off < w.size(); off += 2) {
      const float v = normal(rng);
      const uint16_t h = t == DType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      std::memcpy(&w[off], &h, 2);
    }
    return w;
  }
  const int block_bytes = dtype_traits(t).block_bytes;
  for (size_t off = 0; off < w.size(); off += block_bytes) {
    switch (t) {
      case DType::Q4_1: put_f16(w, off + 2, -scale(rng) * 8); [[fallthrough]];
      case DType::Q8_0: case DType::Q4_0: put_f16(w, off, scale(rng)); break;
      case DType::Q4_K: case DType::Q5_K: put_f16(w, off, scale(rng) / 16); put_f16(w, off + 2, scale(rng) / 16); break;
      case DType::Q6_K: put_f16(w, off + 208, scale(rng) / 32); break;
      default: break;
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

// The AVX2 activation quantizer equals the scalar one bit for bit: ordinary values, ties at
// .5 after scaling, tiny blocks whose scale is an fp16 subnormal, zeros; and it refuses
// infinities and NaN as the scalar one does.
TEST(QuantizeActivations, Avx2EqualsScalar) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
    GTEST_SKIP() << "no AVX2+FMA+F16C on this CPU";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(32 * 64);
  for (size_t i = 0; i < x.size(); ++i) {
    const int block = static_cast<int>(i / 32);
    const float magnitude = block < 8 ? 1e-6f : block < 16 ? 1e4f : 1.0f;
    x[i] = block >= 16 && block < 24 ? static_cast<float>(static_cast<int>(normal(rng) * 40)) / 2 : normal(rng) * magnitude;
  }
  for (int j = 0; j < 32; ++j) x[24 * 32 + j] = 0.0f;
  for (int j = 0; j < 32; ++j) x[26 * 32 + j] = normal(rng) * 1e-38f;  // 127 / max overflows: all zeros
  x[25 * 32] = 127.0f;  // exact ties: v·127/127 = k + 0.5
  for (int j = 1; j < 32; ++j) x[25 * 32 + j] = j + 0.5f;
  std::vector<ActivationBlock> scalar(64), simd(64);
  quantize_activations(x.data(), static_cast<int64_t>(x.size()), scalar.data());
  for (int8_t q : scalar[26].qs) ASSERT_EQ(q, 0);
  ASSERT_TRUE(quantize_activations_avx2(x.data(), static_cast<int64_t>(x.size()), simd.data()));
  for (int b = 0; b < 64; ++b) {
    EXPECT_EQ(simd[b].d, scalar[b].d) << "block " << b;
    EXPECT_EQ(simd[b].s, scalar[b].s) << "block " << b;
    EXPECT_EQ(std::memcmp(simd[b].qs, scalar[b].qs, 32), 0) << "block " << b;
  }
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<float> y(64, 1.0f);
    y[40] = bad;
    EXPECT_FALSE(quantize_activations_avx2(y.data(), 64, simd.data()));
    EXPECT_THROW(quantize_activations(y.data(), 64, scalar.data()), std::exception);
    std::vector<uint8_t> w(dtype_row_bytes(DType::Q8_0, 64), 0);
    std::vector<float> out(1);
    EXPECT_THROW(linear_stored(y.data(), 1, 64, DType::Q8_0, w.data(), 1, nullptr, out.data()), std::exception);
  }
}

TEST(QuantizeSuperblockActivations, FollowsGgmlQ8KRules) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = (i - 127.5f) * 0.03125f;  // amax 3.984375 at both ends
  SuperblockActivation b;
  quantize_superblock_activations(x.data(), 256, &b);
  EXPECT_EQ(b.d, 3.984375f / 127.0f);  // fp32, not rounded through fp16
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[255], 127);
  for (int r = 0; r < 16; ++r) {
    int sum = 0;
    for (int i = 16 * r; i < 16 * r + 16; ++i) {
      EXPECT_EQ(b.qs[i], static_cast<int>(std::nearbyint(x[i] * (127.0f / 3.984375f)))) << i;
      sum += b.qs[i];
    }
    EXPECT_EQ(b.sums[r], sum) << "run " << r;
  }
  std::vector<float> zeros(256, 0.0f);
  quantize_superblock_activations(zeros.data(), 256, &b);
  EXPECT_EQ(b.d, 0.0f);
  for (int8_t q : b.qs) EXPECT_EQ(q, 0);
  zeros[3] = NAN;
  EXPECT_THROW(quantize_superblock_activations(zeros.data(), 256, &b), std::exception);
}

// The AVX2 and AVX-512 super-block quantizers equal the scalar one bit for bit (tiny and huge blocks, ties at .5
// after scaling, zeros) and refuses infinities and NaN.
TEST(QuantizeSuperblockActivations, Avx2EqualsScalar) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
    GTEST_SKIP() << "no AVX2+FMA+F16C on this CPU";
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(256 * 8);
  for (size_t i = 0; i < x.size(); ++i) {
    const int block = static_cast<int>(i / 256);
    const float magnitude = block == 0 ? 1e-30f : block == 1 ? 1e6f : block == 5 ? 1e-38f : 1.0f;
    x[i] = block == 2 ? static_cast<float>(static_cast<int>(normal(rng) * 40)) / 2 : normal(rng) * magnitude;
  }
  for (int j = 0; j < 256; ++j) x[3 * 256 + j] = 0.0f;
  x[4 * 256] = 127.0f;  // exact ties: v·127/127 = k + 0.5
  for (int j = 1; j < 256; ++j) x[4 * 256 + j] = static_cast<float>(j % 127) + 0.5f - (j % 2 ? 0.0f : 127.0f);
  std::vector<SuperblockActivation> scalar(8), simd(8);
  quantize_superblock_activations(x.data(), static_cast<int64_t>(x.size()), scalar.data());
  // Block 5's max|x| is below 127 / FLT_MAX: 127 / max would be infinite, so the block is all zeros.
  for (int i = 0; i < 256; ++i) ASSERT_EQ(scalar[5].qs[i], 0) << i;
  for (int16_t sum : scalar[5].sums) ASSERT_EQ(sum, 0);
  using Quantizer = bool (*)(const float*, int64_t, SuperblockActivation*);
  std::vector<std::pair<const char*, Quantizer>> kernels = {{"AVX2", quantize_superblock_activations_avx2}};
  if (stored_matmul_avx512_available()) kernels.push_back({"AVX-512", quantize_superblock_activations_avx512});
  for (const auto& [name, quantize] : kernels) {
    ASSERT_TRUE(quantize(x.data(), static_cast<int64_t>(x.size()), simd.data())) << name;
    for (int b = 0; b < 8; ++b) {
      EXPECT_EQ(simd[b].d, scalar[b].d) << name << " block " << b;
      EXPECT_EQ(std::memcmp(simd[b].qs, scalar[b].qs, 256), 0) << name << " block " << b;
      EXPECT_EQ(std::memcmp(simd[b].sums, scalar[b].sums, sizeof scalar[b].sums), 0) << name << " block " << b;
    }
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<float> y(512, 1.0f);
      y[300] = bad;
      EXPECT_FALSE(quantize(y.data(), 512, simd.data())) << name;
    }
  }
}

class StoredLinearTest : public ::testing::TestWithParam<DType> {
 protected:
  bool is_half() const { return GetParam() == DType::F16 || GetParam() == DType::BF16; }
};

TEST_P(StoredLinearTest, EqualsDequantizedProductInDouble) {
  const DType t = GetParam();
  std::mt19937 rng(99);
  const int64_t in = 512, out = 37, n = 3;
  const std::vector<uint8_t> w = random_rows(t, out, in, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * in), bias(out);
  for (float& v : x) v = normal(rng);
  for (float& v : bias) v = normal(rng);
  std::vector<float> y(n * out);
  linear_stored(x.data(), n, in, t, w.data(), out, bias.data(), y.data());

  const size_t row_bytes = dtype_row_bytes(t, in);
  const bool k_quant = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
  std::vector<float> w_row(in), a(in);
  std::vector<ActivationBlock> act(in / 32);
  std::vector<SuperblockActivation> k_act(in / 256);
  for (int64_t r = 0; r < n; ++r) {
    // The activations as the kernels see them: 8-bit values times their block's scale.
    if (k_quant) {
      quantize_superblock_activations(x.data() + r * in, in, k_act.data());
      for (int64_t i = 0; i < in; ++i) a[i] = k_act[i / 256].d * k_act[i / 256].qs[i % 256];
    } else {
      quantize_activations(x.data() + r * in, in, act.data());
      for (int64_t i = 0; i < in; ++i) a[i] = is_half() ? x[r * in + i] : act[i / 32].d * act[i / 32].qs[i % 32];
    }
    for (int64_t o = 0; o < out; ++o) {
      dequantize_row(t, w.data() + o * row_bytes, w_row.data(), in);
      double ref = bias[o], magnitude = std::fabs(bias[o]);
      for (int64_t i = 0; i < in; ++i) {
        ref += double{w_row[i]} * a[i];
        magnitude += std::fabs(double{w_row[i]} * a[i]);
      }
      // Q4_1's offsets multiply the fp16-rounded block sum, as ggml's Q8_1 does; the K-quants' minima
      // multiply exact sums.
      const double tol = 1e-5 * magnitude + (t == DType::Q4_1 ? 2e-3 * magnitude : 0.0);
      EXPECT_NEAR(y[r * out + o], ref, tol) << "token " << r << " out " << o;
    }
  }
}

// Every tile shape (rows 1..4 against tokens 1..4, and the panel edges) equals the scalar
// reference bit for bit, and every token's outputs equal those it gets alone.
TEST_P(StoredLinearTest, SimdEqualsReferenceAndIsBatchInvariant) {
  const DType t = GetParam();
  std::mt19937 rng(7);
  const int64_t in = is_half() ? 584 : 768, out = 53;  // 584: F16/BF16 rows with a tail past 8
  const std::vector<uint8_t> w = random_rows(t, out, in, rng);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> bias(out);
  for (float& v : bias) v = normal(rng);
  for (int64_t n : {1, 2, 3, 5, 9}) {
    std::vector<float> x(n * in);
    for (float& v : x) v = normal(rng);
    std::vector<float> simd(n * out), reference(n * out), alone(out);
    linear_stored(x.data(), n, in, t, w.data(), out, bias.data(), simd.data());
    linear_stored_reference(x.data(), n, in, t, w.data(), out, bias.data(), reference.data());
    for (int64_t i = 0; i < n * out; ++i) ASSERT_EQ(simd[i], reference[i]) << "n " << n << " element " << i;
    for (int64_t r = 0; r < n; ++r) {
      linear_stored(x.data() + r * in, 1, in, t, w.data(), out, nullptr, alone.data());
      for (int64_t o = 0; o < out; ++o) ASSERT_EQ(simd[r * out + o], alone[o] + bias[o]) << "n " << n << " token " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, StoredLinearTest,
                         ::testing::Values(DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K,
                                           DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_traits(info.param).name); });

// Products of one input in one call (q/k/v, gate/up), of mixed types and sizes that end in
// partial panels: each output is what linear_stored gives for that product alone, and a bad
// type among them is refused before anything runs.
TEST(StoredLinear, ManyProductsEqualEachAlone) {
  std::mt19937 rng(21);
  const int64_t in = 256;
  const std::vector<std::pair<DType, int64_t>> shapes = {{DType::Q4_1, 37}, {DType::F16, 16}, {DType::Q6_K, 5},
                                                         {DType::Q8_0, 70}};
  std::vector<std::vector<uint8_t>> weights;
  for (const auto& [t, out] : shapes) weights.push_back(random_rows(t, out, in, rng));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> bias(70);
  for (float& v : bias) v = normal(rng);
  for (int64_t n : {1, 6}) {
    std::vector<float> x(n * in);
    for (float& v : x) v = normal(rng);
    std::vector<std::vector<float>> together(shapes.size()), alone(shapes.size());
    std::vector<StoredProduct> products;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& [t, out] = shapes[i];
      together[i].assign(n * out, -1.0f);
      alone[i].assign(n * out, -2.0f);
      const float* b = i % 2 ? bias.data() : nullptr;
      products.push_back({t, weights[i].data(), out, b, together[i].data()});
      linear_stored(x.data(), n, in, t, weights[i].data(), out, b, alone[i].data());
    }
    linear_stored_many(x.data(), n, in, products.data(), static_cast<int>(products.size()));
    for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "product " << i << ", n " << n;
  }
  std::vector<float> x(in), y(8);
  const std::vector<StoredProduct> bad = {{DType::Q4_1, weights[0].data(), 1, nullptr, y.data()},
                                          {DType::Q2_K, weights[0].data(), 1, nullptr, y.data() + 1}};
  EXPECT_THROW(linear_stored_many(x.data(), 1, in, bad.data(), 2), std::exception);
}

// Interleaved rows (Q4_1 8 at a time for the AVX2 kernel, Q4_1, Q8_0, Q4_K and Q6_K 16 at a time for
// the AVX-512 VNNI one): the same bytes regrouped (Q4_K's scales unpacked: 4 bytes more per block), every output bit-identical to the reference on the
// rows as stored (so to the row tiles too), for groups that end part-way (37 rows), with and
// without a bias, for 1 to 35 tokens (the AVX-512 kernel takes them up to four at a time, the AMX
// one Q4_K and Q6_K in blocks of 16), next to a row-layout product.
class InterleavedRows : public ::testing::TestWithParam<std::pair<DType, int>> {};

TEST_P(InterleavedRows, EqualTheRowLayout) {
  const auto [t, R] = GetParam();
  if (!interleaved_kernel_available(t, R))
    GTEST_SKIP() << "no kernel for " << dtype_traits(t).name << " in groups of " << R << " rows on this CPU";
  std::mt19937 rng(33 + R + static_cast<int>(t));
  const int64_t in = t == DType::Q4_K || t == DType::Q6_K ? 512 : 192;
  const size_t extra_per_block = t == DType::Q4_K ? 4 : 0;
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int64_t out : {8, 16, 37, 64}) {
    const std::vector<uint8_t> rows = random_rows(t, out, in, rng);
    const LargeBytes grouped = interleave_rows(t, rows.data(), out, in, R);
    ASSERT_EQ(grouped.size(), interleaved_bytes(t, out, in, R));
    EXPECT_EQ(grouped.size(), size_t((out + R - 1) / R * R) *
                                  (dtype_row_bytes(t, in) + extra_per_block * in / dtype_traits(t).block_elems));
    std::vector<uint8_t> row(dtype_row_bytes(t, in));
    for (int64_t o = 0; o < out; ++o) {
      deinterleave_row(t, grouped.data(), in, R, o, row.data());
      ASSERT_EQ(std::memcmp(row.data(), rows.data() + o * row.size(), row.size()), 0) << "row " << o;
    }
    std::vector<float> bias(out);
    for (float& v : bias) v = normal(rng);
    const std::vector<uint8_t> other = random_rows(DType::Q8_0, 24, in, rng);
    // 16, 35, 530: AMX's blocks of 16 tokens, with a tail, and in two chunks (of 272 and 256) with a tail
    for (int64_t n : {1, 2, 3, 5, 7, 9, 16, 35, 530}) {
      std::vector<float> x(n * in);
      for (float& v : x) v = normal(rng);
      for (const float* b : {static_cast<const float*>(nullptr), static_cast<const float*>(bias.data())}) {
        std::vector<float> reference(n * out), fast(n * out, -1.0f), other_alone(n * 24), other_together(n * 24);
        linear_stored_reference(x.data(), n, in, t, rows.data(), out, b, reference.data());
        linear_stored(x.data(), n, in, DType::Q8_0, other.data(), 24, nullptr, other_alone.data());
        const StoredProduct products[] = {{DType::Q8_0, other.data(), 24, nullptr, other_together.data()},
                                          {t, grouped.data(), out, b, fast.data(), R}};
        linear_stored_many(x.data(), n, in, products, 2);
        for (int64_t i = 0; i < n * out; ++i)
          ASSERT_EQ(fast[i], reference[i]) << "out " << out << ", n " << n << ", element " << i;
        EXPECT_EQ(other_together, other_alone);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TypeAndGroupRows, InterleavedRows,
                         ::testing::Values(std::make_pair(DType::Q4_1, 8), std::make_pair(DType::Q4_1, 16),
                                           std::make_pair(DType::Q8_0, 16), std::make_pair(DType::Q4_K, 16),
                                           std::make_pair(DType::Q6_K, 16)));

// The AMX kernel against the VNNI one on the same groups and tokens, called directly: three groups
// (the last one 8 rows short), three blocks of 256 values, 48 tokens through tiles and 5 more through
// its VNNI tail, a bias; every output equal.
TEST(StoredLinear, AmxTilesEqualVnni) {
  if (!stored_matmul_amx_available()) GTEST_SKIP() << "no AMX on this CPU (or TQSERVE_AMX=0)";
  for (DType t : {DType::Q4_K, DType::Q6_K}) {
    std::mt19937 rng(71 + static_cast<int>(t));
    const int64_t in = 768, out = 40, n = 53, tiled = 48, n_super = in / 256;
    const std::vector<uint8_t> rows = random_rows(t, out, in, rng);
    const LargeBytes grouped = interleave_rows(t, rows.data(), out, in, 16);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(n * in), bias(out);
    for (float& v : x) v = normal(rng);
    for (float& v : bias) v = normal(rng);
    std::vector<SuperblockActivation> act(n * n_super);
    quantize_superblock_activations(x.data(), n * in, act.data());
    std::vector<float> tiles(n * out, -1.0f), vnni(n * out, -2.0f);
    std::vector<AmxActivationSuperblock> packed(tiled / kAmxTokens * n_super);
    pack_superblock_activations_for_amx(act.data(), tiled, n_super, packed.data());
    linear_interleaved16_amx_groups(t, packed.data(), tiled, act.data() + tiled * n_super, n - tiled, n_super,
                                    grouped.data(), out, bias.data(), tiles.data(), 0, 3);
    linear_interleaved16_k_avx512_groups(t, act.data(), n, n_super, grouped.data(), out, bias.data(), vnni.data(), 0,
                                         3);
    for (int64_t i = 0; i < n * out; ++i) ASSERT_EQ(tiles[i], vnni[i]) << dtype_traits(t).name << " element " << i;
  }
}

// Interleaved Q4_K, Q6_K and Q8_0 products of one input in one call (the K-quants sharing the
// super-block activations and, at 16+ tokens on AMX, their packed tiles; Q8_0 its block sums):
// each output is what the product alone gives.
TEST(StoredLinear, InterleavedProductsTogetherEqualEachAlone) {
  std::mt19937 rng(90);
  const int64_t in = 512;
  const std::vector<std::pair<DType, int64_t>> shapes = {{DType::Q4_K, 37}, {DType::Q6_K, 21}, {DType::Q8_0, 24}};
  std::vector<LargeBytes> grouped;
  std::vector<int> group_rows;
  for (const auto& [t, out] : shapes) {
    group_rows.push_back(interleaved_group_rows(t));
    if (group_rows.back() == 0) GTEST_SKIP() << "no interleaved kernel for " << dtype_traits(t).name << " here";
    const std::vector<uint8_t> rows = random_rows(t, out, in, rng);
    grouped.push_back(interleave_rows(t, rows.data(), out, in, group_rows.back()));
  }
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int64_t n : {1, 5, 35}) {
    std::vector<float> x(n * in);
    for (float& v : x) v = normal(rng);
    std::vector<std::vector<float>> together(shapes.size()), alone(shapes.size());
    std::vector<StoredProduct> products;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& [t, out] = shapes[i];
      together[i].assign(n * out, -1.0f);
      alone[i].assign(n * out, -2.0f);
      products.push_back({t, grouped[i].data(), out, nullptr, together[i].data(), group_rows[i]});
      const StoredProduct one{t, grouped[i].data(), out, nullptr, alone[i].data(), group_rows[i]};
      linear_stored_many(x.data(), n, in, &one, 1);
    }
    linear_stored_many(x.data(), n, in, products.data(), static_cast<int>(products.size()));
    for (size_t i = 0; i < shapes.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "product " << i << ", n " << n;
  }
}

TEST(StoredLinear, InterleavedLayoutRefusesWhatItCannotHold) {
  std::vector<uint8_t> w(1024);
  EXPECT_THROW(interleave_rows(DType::Q4_K, w.data(), 1, 256, 8), std::exception);  // Q4_K: groups of 16
  EXPECT_THROW(interleave_rows(DType::Q4_K, w.data(), 1, 96, 16), std::exception);  // not whole blocks
  EXPECT_THROW(interleave_rows(DType::Q5_K, w.data(), 1, 256, 16), std::exception);
  EXPECT_THROW(interleave_rows(DType::Q4_1, w.data(), 1, 48, 8), std::exception);
  EXPECT_THROW(interleave_rows(DType::Q4_1, w.data(), 1, 32, 4), std::exception);
  EXPECT_EQ(interleaved_group_rows(DType::Q5_K), 0);
  EXPECT_FALSE(interleaved_kernel_available(DType::Q8_0, 8));  // Q8_0 has only the VNNI kernel
  std::vector<float> x(64), y(8);
  const StoredProduct bad{DType::Q8_0, w.data(), 1, nullptr, y.data(), 8};
  EXPECT_THROW(linear_stored_many(x.data(), 1, 64, &bad, 1), std::exception);
}

TEST(StoredLinear, RefusesWidthsThatAreNotWholeBlocks) {
  std::vector<uint8_t> w(1024);
  std::vector<float> x(300), y(1);
  EXPECT_THROW(linear_stored(x.data(), 1, 288, DType::Q4_K, w.data(), 1, nullptr, y.data()), std::exception);
  EXPECT_THROW(linear_stored(x.data(), 1, 48, DType::Q8_0, w.data(), 1, nullptr, y.data()), std::exception);
  EXPECT_THROW(linear_stored(x.data(), 1, 64, DType::Q2_K, w.data(), 1, nullptr, y.data()), std::exception);
}

}  // namespace
}  // namespace tq
