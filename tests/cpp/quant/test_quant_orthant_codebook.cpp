// tq3o / tq2o rows (quant/orthant_codebook.h): the search against comparing every pattern in
// double, the table's distortion against the scalar Lloyd-Max quantizer's published figures, the
// row layout by hand, the least-squares rounds, the decoders, and the row error against tq3h's and
// tq2h's on random rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "errors/error.h"
#include "kernels/coded_row.h"
#include "kernels/dequantize.h"
#include "kv/kv_dtype.h"
#include "kv/kv_row_codec.h"
#include "quant/orthant_codebook.h"
#include "quant/rotation.h"
#include "support/row_error_support.h"

namespace tq {
namespace {

// The nearest pattern by the definition: every squared distance in double, the first smallest.
int nearest_in_double(const OrthantCodebook& cb, const float* m, double* best_d = nullptr) {
  int best = 0;
  double bd = INFINITY;
  for (int p = 0; p < kOrthantPatterns; ++p) {
    double s = 0;
    for (int k = 0; k < cb.group; ++k) {
      const double e = double(m[k]) - cb.patterns[size_t(p) * cb.group + k];
      s += e * e;
    }
    if (s < bd) bd = s, best = p;
  }
  if (best_d) *best_d = bd;
  return best;
}

TEST(QuantOrthantCodebook, SearchFindsTheNearestPattern) {
  for (int bits : {3, 2})
    for (int d : {64, 128, 8}) {
      const OrthantCodebook& cb = orthant_codebook(d, bits);
      EXPECT_EQ(&cb, &orthant_codebook(d, bits));  // built once
      EXPECT_EQ(cb.group, bits == 3 ? 4 : 8);
      std::mt19937 rng(d * bits);
      std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(float(d)));
      int worse = 0;
      for (int i = 0; i < 20000; ++i) {
        float m[8];
        for (int k = 0; k < cb.group; ++k) m[k] = std::abs(normal(rng)) * (i % 5 == 0 ? 3.0f : 1.0f);
        const int found = cb.nearest(m);
        double best_d, found_d = 0;
        nearest_in_double(cb, m, &best_d);
        for (int k = 0; k < cb.group; ++k) {
          const double e = double(m[k]) - cb.patterns[size_t(found) * cb.group + k];
          found_d += e * e;
        }
        // float distances may order two patterns within rounding of each other either way
        if (found_d > best_d * (1.0 + 1e-5) + 1e-12) ++worse;
      }
      EXPECT_EQ(worse, 0) << "bits=" << bits << " d=" << d;
      // The vector search is the plain loop's, bit for bit: random, tied, zero, huge and infinite inputs.
      int differ = 0;
      std::uniform_int_distribution<int> pick(0, kOrthantPatterns - 1);
      for (int i = 0; i < 20000; ++i) {
        float m[8];
        for (int k = 0; k < cb.group; ++k) {
          const int kind = (i + k) % 11;
          m[k] = kind == 0 ? 0.0f
                 : kind == 1 ? cb.patterns[size_t(pick(rng)) * cb.group + k]  // on a pattern's coordinate
                 : kind == 2 ? 1e30f
                 : std::abs(normal(rng)) * (i % 3 == 0 ? 4.0f : 1.0f);
        }
        if (i % 97 == 0) m[i % cb.group] = INFINITY;
        if (i % 5 == 1) std::copy_n(cb.patterns.data() + size_t(pick(rng)) * cb.group, cb.group, m);  // a pattern itself
        differ += cb.nearest(m) != cb.nearest_scalar(m);
      }
      EXPECT_EQ(differ, 0) << "bits=" << bits << " d=" << d;
      const float nan[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
      EXPECT_EQ(cb.nearest(nan), 0);
      EXPECT_EQ(cb.nearest_scalar(nan), 0);
    }
  EXPECT_THROW(orthant_codebook(12, 3), Error);
  EXPECT_THROW(orthant_codebook(0, 2), Error);
  EXPECT_THROW(orthant_codebook(520, 2), Error);
  EXPECT_THROW(orthant_codebook(64, 4), Error);
  EXPECT_THROW(check_kv_dtype(KvDtype::TQ2O, 60, false), Error);
}

// Mean squared error per coordinate of a standard normal group: the scalar Lloyd-Max quantizer of
// N(0, 1) has 0.03454 at 3 bits and 0.1175 at 2 (Max 1960); the generator measured 0.0263 and 0.0947.
TEST(QuantOrthantCodebook, PatternsAreDistinctPositiveAndBeatTheScalarGrid) {
  for (int bits : {3, 2}) {
    const int group = orthant_group(bits);
    const float* p = orthant_codebook_standard_patterns(bits);
    std::set<std::vector<float>> distinct;
    for (int i = 0; i < kOrthantPatterns; ++i) {
      distinct.insert(std::vector<float>(p + i * group, p + (i + 1) * group));
      for (int k = 0; k < group; ++k) EXPECT_GT(p[i * group + k], 0.0f) << i;
    }
    EXPECT_EQ(distinct.size(), size_t(kOrthantPatterns));
    const OrthantCodebook& cb = orthant_codebook(64, bits);
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 0.125f);  // a coordinate of a unit vector in R^64
    double sum = 0.0;
    const int n = 40000;
    for (int i = 0; i < n; ++i) {
      float m[8];
      for (int k = 0; k < group; ++k) m[k] = std::abs(normal(rng));
      const int q = cb.nearest(m);
      for (int k = 0; k < group; ++k) {
        const double e = m[k] - cb.patterns[size_t(q) * group + k];
        sum += e * e;
      }
    }
    const double mse = sum / (double(n) * group) * 64.0;  // in units of the standard normal
    const double scalar = bits == 3 ? 0.03454 : 0.1175, generated = bits == 3 ? 0.0263 : 0.0947;
    EXPECT_NEAR(mse, generated, 0.03 * generated) << bits;
    EXPECT_LT(mse, 0.85 * scalar) << bits;
  }
}

TEST(QuantOrthantCodebook, RowLayoutAndScaleByHand) {
  for (int bits : {3, 2}) {
    const int d = 16, group = orthant_group(bits), groups = d / group;
    const Rotation rot = Rotation::make(RotationKind::dense, d, 5, 0);
    const OrthantCodebook& cb = orthant_codebook(d, bits);
    std::vector<float> x = {0.3f, -1.2f, 0.8f, 0.05f, -0.6f, 2.0f, -0.1f, 0.7f,
                            1.1f, -0.4f, 0.2f, -0.9f, 0.6f, 0.0f, -1.5f, 0.35f};
    std::vector<uint8_t> row(tq_orthant_row_bytes(d, bits));
    EXPECT_EQ(row.size(), size_t(groups + 2 + 2));
    EXPECT_EQ(row.size(), kv_row_bytes(bits == 3 ? KvDtype::TQ3H : KvDtype::TQ2H, d));  // tq3h's / tq2h's bytes
    tq_encode_orthant_row(x.data(), cb, rot, row.data(), TqScaleMode::plain_norm);
    double n2 = 0;
    for (float v : x) n2 += double(v) * v;
    float u[16], y[16];
    for (int j = 0; j < d; ++j) u[j] = x[j] * (1.0f / float(std::sqrt(n2)));
    rot.apply(u, y);
    for (int g = 0; g < groups; ++g) {
      float m[8];
      for (int k = 0; k < group; ++k) m[k] = std::abs(y[g * group + k]);
      EXPECT_EQ(row[g], cb.nearest(m)) << g;
    }
    for (int c = 0; c < d; ++c) EXPECT_EQ((row[groups + c / 8] >> (c % 8)) & 1, y[c] < 0 ? 1 : 0) << c;
    const float scale = fp16_at(row.data() + groups + 2);
    EXPECT_EQ(scale, fp16_to_fp32(fp32_to_fp16(float(std::sqrt(n2)))));

    // The decoder by its definition: +-scale * magnitude, negative where the sign bit is set.
    const KvRowCodec codec(bits == 3 ? KvDtype::TQ3O : KvDtype::TQ2O, d, 0, KvQuantOptions{});
    EXPECT_EQ(codec.orthant_codebook(), &cb);
    EXPECT_THROW(codec.codebook(), Error);
    const CodedRowFormat f = codec.row_format();
    ASSERT_EQ(f.codec, RowCodec::TQ_ORTHANT);
    EXPECT_EQ(coded_row_bytes(f), row.size());
    float out[16];
    decode_coded_row_scalar(f, row.data(), out);
    for (int c = 0; c < d; ++c) {
      const float v = cb.patterns[size_t(row[c / group]) * group + c % group] * scale;
      EXPECT_EQ(out[c], y[c] < 0 ? -v : v) << c;
    }

    // A zero row stores scale 0 and decodes to zeros; a non-finite one keeps a non-finite scale.
    std::vector<float> zero(d, 0.0f), back(d, 1.0f);
    codec.encode(zero.data(), 0, row.data());
    EXPECT_EQ(fp16_at(row.data() + groups + 2), 0.0f);
    codec.decode(row.data(), 0, back.data());
    for (float v : back) EXPECT_EQ(v, 0.0f);
    std::vector<float> bad = x;
    bad[3] = std::numeric_limits<float>::quiet_NaN();
    codec.encode(bad.data(), 0, row.data());
    EXPECT_FALSE(std::isfinite(fp16_at(row.data() + groups + 2)));
  }
}

TEST(QuantOrthantCodebook, LeastSquaresScaleIsThreeRoundsOfAlternation) {
  // The definition, written out: patterns nearest to |y|, then three rounds of
  // (alpha = <|y|, c> / |c|^2, patterns nearest to |y| / alpha), then the scale n * alpha.
  for (int bits : {3, 2}) {
    const int d = 64, group = orthant_group(bits), groups = d / group;
    const Rotation rot = Rotation::make(RotationKind::dense, d, 11, 0);
    const OrthantCodebook& cb = orthant_codebook(d, bits);
    std::mt19937 rng(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(d), u(d), y(d);
    std::vector<uint8_t> row(tq_orthant_row_bytes(d, bits)), idx(groups), before(groups);
    int later_rounds_change = 0;
    for (int r = 0; r < 200; ++r) {
      double n2 = 0;
      for (float& v : x) v = normal(rng) * (1.0f + float(r % 7)), n2 += double(v) * v;
      const float n = static_cast<float>(std::sqrt(n2));
      for (int j = 0; j < d; ++j) u[j] = x[j] * (1.0f / n);
      rot.apply(u.data(), y.data());
      auto assign = [&](float inv_alpha) {
        for (int g = 0; g < groups; ++g) {
          float m[8];
          for (int k = 0; k < group; ++k) m[k] = std::abs(y[g * group + k]) * inv_alpha;
          idx[g] = static_cast<uint8_t>(cb.nearest(m));
        }
      };
      auto alpha_of_codes = [&] {
        double yc = 0, cc = 0;
        for (int g = 0; g < groups; ++g)
          for (int k = 0; k < group; ++k) {
            const double c = cb.patterns[size_t(idx[g]) * group + k];
            yc += std::abs(double(y[g * group + k])) * c, cc += c * c;
          }
        return yc / cc;
      };
      assign(1.0f);
      const std::vector<uint8_t> first = idx;
      for (int round = 0; round < 3; ++round) {
        before = idx;
        assign(static_cast<float>(1.0 / alpha_of_codes()));
      }
      later_rounds_change += first != idx;
      const float scale = static_cast<float>(double(n) * alpha_of_codes());
      tq_encode_orthant_row(x.data(), cb, rot, row.data(), TqScaleMode::least_squares);
      for (int g = 0; g < groups; ++g) ASSERT_EQ(row[g], idx[g]) << "row " << r << " group " << g;
      ASSERT_EQ(fp16_at(row.data() + groups + d / 8), fp16_to_fp32(fp32_to_fp16(scale))) << "row " << r;
    }
    EXPECT_GT(later_rounds_change, 0) << bits;
  }
}

TEST(QuantOrthantCodebook, VectorDecodersMatchTheScalarOne) {
  // Odd row and output strides (rows and outputs not packed); d = 24: no AVX-512 decoder (16
  // coordinates a step), the AVX2 entry's scalar loop serves it.
  bool avx512_ran = false;
  for (KvDtype dtype : {KvDtype::TQ3O, KvDtype::TQ2O})
    for (int d : {16, 64, 128, 512, 24}) {
      KvQuantOptions options;  // the Hadamard rotation at 512 (and a dense one's QR would be slow there)
      if (d == 512) options.rotation = RotationKind::hadamard;
      const KvRowCodec codec(dtype, d, 2, options);
      const CodedRowFormat f = codec.row_format();
      EXPECT_NO_THROW(check_coded_row_format(f));
      EXPECT_EQ(coded_row_bytes(f), kv_row_bytes(dtype, d));
      if (d % 16 != 0) EXPECT_FALSE(coded_row_avx512_available(f));
      std::mt19937 rng(d);
      std::normal_distribution<float> normal(0.0f, 2.0f);
      const int rows = 5;
      const size_t rb = codec.row_bytes() + 5, ob = size_t(d) + 3;
      std::vector<uint8_t> coded(rows * rb, 0xA5);
      std::vector<float> x(d);
      for (int r = 0; r < rows; ++r) {
        for (float& v : x) v = normal(rng);
        if (r == 1) x[d / 2] = 0.0f;
        codec.encode(x.data(), 0, coded.data() + r * rb);
      }
      std::vector<float> scalar(rows * ob, -7.0f), simd(rows * ob, -7.0f);
      for (int r = 0; r < rows; ++r) decode_coded_row_scalar(f, coded.data() + r * rb, scalar.data() + r * ob);
      decode_coded_rows_avx2(f, coded.data(), rb, rows, simd.data(), ob);
      EXPECT_EQ(std::memcmp(scalar.data(), simd.data(), scalar.size() * sizeof(float)), 0) << "d=" << d;
      if (!coded_row_avx512_available(f)) continue;
      avx512_ran = true;
      std::fill(simd.begin(), simd.end(), -7.0f);
      decode_coded_rows_avx512(f, coded.data(), rb, rows, simd.data(), ob);
      EXPECT_EQ(std::memcmp(scalar.data(), simd.data(), scalar.size() * sizeof(float)), 0) << "d=" << d;
    }
  if (!avx512_ran) GTEST_SKIP() << "this CPU has no AVX-512: the gather decoder was not compared";
}

// Row error on random rows against the scalar codes of the same bytes: lower by about the
// generator's margin. Measured: see the printed figures.
TEST(QuantOrthantCodebook, RowErrorBelowTq3hAndTq2h) {
  for (const auto& [orthant, scalar_dtype] : {std::pair{KvDtype::TQ3O, KvDtype::TQ3H}, std::pair{KvDtype::TQ2O, KvDtype::TQ2H}})
    for (int d : {64, 128}) {
      const KvRowCodec coded(orthant, d, 1, KvQuantOptions{}), scalar(scalar_dtype, d, 1, KvQuantOptions{});
      EXPECT_EQ(coded.row_bytes(), scalar.row_bytes());
      const double e_orthant = row_error_test::mean_relative_row_error(coded, 2000, 3);
      const double e_scalar = row_error_test::mean_relative_row_error(scalar, 2000, 3);
      std::cout << "  " << kv_dtype_name(orthant) << " d=" << d << ": " << e_orthant << ", "
                << kv_dtype_name(scalar_dtype) << " " << e_scalar << "\n";
      EXPECT_LT(e_orthant, 0.88 * e_scalar) << kv_dtype_name(orthant) << " d=" << d;
    }
}

}  // namespace
}  // namespace tq
