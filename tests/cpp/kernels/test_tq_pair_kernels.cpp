// The integer attention kernels on tq4p rows (RowCodec::TQ_PAIRS): the scalar key score is the
// score of the int8 query against the int8 points (checked in double precision), the AVX-512
// scorer and value summer give the scalar results bit for bit, and attention over tq4p pages with
// both integer paths stays within the int8 forms' error of the fp32 path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "errors/error.h"
#include "kernels/coded_row.h"
#include "kernels/dequantize.h"
#include "kernels/tq_key_scores.h"
#include "kernels/tq_value_sums.h"
#include "quant/pair_codebook.h"

namespace tq {
namespace {

CodedRowFormat pair_format(int d) {
  CodedRowFormat f;
  f.codec = RowCodec::TQ_PAIRS;
  f.dim = d;
  f.bits = 4;
  f.f16_scale = true;
  f.levels = pair_codebook(d, true).points.data();
  return f;
}

// n rows `stride` bytes apart: random codes and a positive fp16 scale after them.
std::vector<uint8_t> random_pair_rows(int d, int n, size_t stride, std::mt19937& rng) {
  std::vector<uint8_t> bytes(size_t(n) * stride + 64, 0xA5);
  std::uniform_int_distribution<int> code(0, 255);
  std::uniform_real_distribution<float> scale(0.3f, 3.0f);
  for (int i = 0; i < n; ++i) {
    uint8_t* row = bytes.data() + i * stride;
    for (int c = 0; c < d / 2; ++c) row[c] = static_cast<uint8_t>(code(rng));
    const uint16_t s = fp32_to_fp16(scale(rng));
    std::memcpy(row + d / 2, &s, 2);
  }
  return bytes;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng, float sigma) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(TqPairKernels, ScalarScoreIsTheScoreOfTheInt8Forms) {
  std::mt19937 rng(21);
  for (int d : {64, 128}) {
    const CodedRowFormat f = pair_format(d);
    ASSERT_TRUE(tq_key_scores_format(f));
    ASSERT_TRUE(tq_value_sums_format(f));
    const Int8Levels l = int8_levels_of(f);
    EXPECT_TRUE(l.pairs_mirrored);  // the layout the AVX-512 kernels read (kernels/tq_pair_codes.h)
    // The int8 points are the grid the codec snapped the points to: exact.
    for (int k = 0; k < 256; ++k) {
      EXPECT_EQ(l.px[k] * l.scale, f.levels[2 * k]) << k;
      EXPECT_EQ(l.py[k] * l.scale, f.levels[2 * k + 1]) << k;
    }
    const size_t stride = d / 2 + 2;
    const std::vector<uint8_t> rows = random_pair_rows(d, 20, stride, rng);
    const std::vector<float> q = random_vec(d, rng, 1.3f);
    std::vector<int8_t> q8(d);
    float q_scale = 0;
    int32_t q_sum = 0;
    ASSERT_TRUE(quantize_query_int8(q.data(), d, q8.data(), &q_scale, &q_sum));
    const float factor = int8_score_factor(q_scale, l, 0.125f);
    for (int i = 0; i < 20; ++i) {
      const uint8_t* row = rows.data() + i * stride;
      const double row_scale = fp16_to_fp32(uint16_t(row[d / 2] | row[d / 2 + 1] << 8));
      double want = 0, mag = 0;
      for (int c = 0; c < d / 2; ++c)  // byte c: coordinates c and c + d/2 (quant/pair_codebook.h)
        for (const auto& [coord, level] : {std::pair{c, l.px[row[c]]}, std::pair{c + d / 2, l.py[row[c]]}}) {
          const double term = double(q8[coord]) * q_scale * double(level) * l.scale * row_scale * 0.125;
          want += term;
          mag += std::fabs(term);
        }
      EXPECT_NEAR(tq_key_score_scalar(f, row, q8.data(), factor, l), want, 1e-6 * mag + 1e-12);
    }
  }
}

TEST(TqPairKernels, Avx512ScorerIsBitIdenticalToScalar) {
  if (!tq_key_scores_avx512_available(pair_format(64))) GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  std::mt19937 rng(6);
  for (int d : {64, 128, 256, 512})
    for (int heads : {1, 3})
      for (int n : {1, 5, 16}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " heads=" + std::to_string(heads) + " n=" + std::to_string(n));
        const CodedRowFormat f = pair_format(d);
        const Int8Levels l = int8_levels_of(f);
        const size_t stride = d / 2 + 2 + 7;  // rows apart, not packed
        const std::vector<uint8_t> bytes = random_pair_rows(d, n, stride, rng);
        const uint8_t* rows[kInt8ScoreTile] = {};
        for (int i = 0; i < n; ++i) rows[i] = bytes.data() + i * stride;
        std::vector<int8_t> q8(size_t(heads) * d);
        std::vector<float> factor(heads);
        std::vector<int32_t> q_sum(heads);
        for (int h = 0; h < heads; ++h) {
          const std::vector<float> q = random_vec(d, rng, 2.0f);
          float q_scale;
          ASSERT_TRUE(quantize_query_int8(q.data(), d, q8.data() + h * d, &q_scale, &q_sum[h]));
          factor[h] = int8_score_factor(q_scale, l, 0.125f);
        }
        std::vector<float> scores(size_t(heads) * kInt8ScoreTile, 7.0f);
        tq_key_scores_avx512(f, rows, n, q8.data(), q_sum.data(), factor.data(), heads, l, scores.data());
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < kInt8ScoreTile; ++i) {
            const float got = scores[h * kInt8ScoreTile + i];
            if (i >= n) {
              EXPECT_EQ(got, -std::numeric_limits<float>::infinity());
              continue;
            }
            const float want = tq_key_score_scalar(f, rows[i], q8.data() + h * d, factor[h], l);
            EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "head " << h << " row " << i << ": " << got << " against " << want;
          }
      }
}

TEST(TqPairKernels, Avx512SummerIsBitIdenticalToScalar) {
  if (!tq_value_sums_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  std::mt19937 rng(9);
  for (int d : {64, 128, 256, 512})
    for (int heads : {1, 3, 9})
      for (int n : {1, 5, 16}) {
        SCOPED_TRACE("d=" + std::to_string(d) + " heads=" + std::to_string(heads) + " n=" + std::to_string(n));
        const CodedRowFormat f = pair_format(d);
        const Int8Levels l = int8_levels_of(f);
        const size_t stride = d / 2 + 2 + 5;
        const std::vector<uint8_t> bytes = random_pair_rows(d, n, stride, rng);
        // A full tile whose rows past n are another sequence's (a longer query's tile): ignored.
        const std::vector<uint8_t> longer = random_pair_rows(d, kInt8SumTile, stride, rng);
        const uint8_t* rows[kInt8SumTile] = {};
        const uint8_t* tile_rows[kInt8SumTile];
        for (int i = 0; i < kInt8SumTile; ++i) {
          if (i < n) rows[i] = bytes.data() + i * stride;
          tile_rows[i] = i < n ? rows[i] : longer.data() + i * stride;
        }
        std::vector<float> p(size_t(heads) * kInt8SumTile);
        std::uniform_real_distribution<float> weight(0.0f, 1.0f);
        for (float& x : p) x = weight(rng);
        std::vector<float> correction(heads);
        for (int h = 0; h < heads; ++h) correction[h] = h % 2 ? 1.0f : 0.37f;
        const std::vector<float> start = random_vec(size_t(heads) * d, rng, 1.0f);
        std::vector<float> a = start, b = start;
        ASSERT_TRUE(tq_value_sums_scalar(f, rows, n, p.data(), correction.data(), heads, l, a.data()));
        TqValueTile tile;
        tq_value_tile_avx512(f, tile_rows, kInt8SumTile, l, &tile);
        ASSERT_TRUE(tq_value_sums_avx512(tile, n, p.data(), correction.data(), heads, l, b.data()));
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
        // The scalar sum is the weighted sum of the int8 points (within the weights' byte rounding).
        for (int h = 0; h < heads; ++h)
          for (int c = 0; c < d; c += 17) {
            double want = start[h * d + c] * correction[h], mag = std::fabs(want);
            for (int i = 0; i < n; ++i) {
              const uint8_t code = rows[i][c % (d / 2)];
              const double level = (c < d / 2 ? l.px[code] : l.py[code]) * double(l.scale);
              const double s = fp16_to_fp32(uint16_t(rows[i][d / 2] | rows[i][d / 2 + 1] << 8));
              want += p[h * kInt8SumTile + i] * s * level;
              mag += std::fabs(p[h * kInt8SumTile + i] * s * level);
            }
            EXPECT_NEAR(a[h * d + c], want, 0.01 * mag + 1e-6) << "head " << h << " coordinate " << c;
          }
      }
}

TEST(TqPairKernels, PointsOutOfTheMirrorLayoutAreRefusedByTheAvx512Kernels) {
  if (!tq_value_sums_avx512_available() || !tq_key_scores_avx512_available(pair_format(64)))
    GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  CodedRowFormat f = pair_format(64);
  std::vector<float> swapped(f.levels, f.levels + 512);
  swapped[0] = -swapped[0];  // point 0's x positive while bit 7 of its code is clear
  f.levels = swapped.data();
  const Int8Levels l = int8_levels_of(f);
  EXPECT_FALSE(l.pairs_mirrored);
  std::mt19937 rng(1);
  const std::vector<uint8_t> bytes = random_pair_rows(64, 16, 34, rng);
  const uint8_t* rows[kInt8ScoreTile];
  for (int i = 0; i < kInt8ScoreTile; ++i) rows[i] = bytes.data() + i * 34;
  std::vector<int8_t> q8(64, 1);
  const int32_t q_sum = 64;
  const float factor = 1.0f;
  std::vector<float> scores(kInt8ScoreTile);
  EXPECT_THROW(tq_key_scores_avx512(f, rows, 16, q8.data(), &q_sum, &factor, 1, l, scores.data()), Error);
  TqValueTile tile;
  EXPECT_THROW(tq_value_tile_avx512(f, rows, 16, l, &tile), Error);
}

}  // namespace
}  // namespace tq
