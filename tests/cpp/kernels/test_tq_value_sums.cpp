// Integer weighted sums of 2-, 3- and 4-bit TurboQuant value rows (kernels/tq_value_sums.h): the AVX-512
// summer gives the scalar reference's accumulators bit for bit; the reference is the sum of the
// byte weights times the int8 levels (checked in double precision); and the attention kernel with
// int8_value_sums is softmax attention over the int8 levels within the weights' rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/paged_attention.h"
#include "kernels/tq_value_sums.h"
#include "support/coded_pages_support.h"

namespace tq {
namespace {

using namespace coded_test;

int code_bytes(const CodedRowFormat& f) { return f.dim * f.bits / 8; }

float stored_scale(const CodedRowFormat& f, const uint8_t* row) {
  if (f.f16_scale) {
    uint16_t h;
    std::memcpy(&h, row + code_bytes(f), 2);
    return fp16_to_fp32(h);
  }
  float s;
  std::memcpy(&s, row + code_bytes(f), 4);
  return s;
}

// Coordinate j's index, read from the packing as kernels/tq_packing.h describes it.
int code_at(const uint8_t* row, int d, int bits, int j) {
  if (bits == 4) return j < d / 2 ? row[j] & 15 : row[j - d / 2] >> 4;
  const int c = j % (d / 4), k = j / (d / 4);
  const int low = (row[c] >> (2 * k)) & 3;
  if (bits == 2) return low;
  return low | ((row[d / 4 + c % (d / 8)] >> (2 * k + c / (d / 8))) & 1) << 2;
}

Spec tq_spec(int bits) { return bits == 4 ? kTq4 : bits == 3 ? kTq3 : kTq2; }

// Weights for `heads` heads: mostly softmax-like values in (0, 1], with zeros and a 1.
std::vector<float> random_weights(int heads, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-8.0f, 0.0f);
  std::vector<float> p(size_t(heads) * kInt8SumTile);
  for (size_t i = 0; i < p.size(); ++i) p[i] = i % 7 == 3 ? 0.0f : std::exp(u(rng));
  p[0] = 1.0f;
  return p;
}

TEST(TqValueSums, ScalarIsTheSumOfTheByteForms) {
  std::mt19937 rng(21);
  for (int bits : {2, 3, 4})
  for (int d : {64, 128, 512})
    for (int n : {1, 9, 16}) {
      SCOPED_TRACE("bits=" + std::to_string(bits) + " d=" + std::to_string(d) + " n=" + std::to_string(n));
      const CodedRowFormat f = format_for(tq_spec(bits), d);
      ASSERT_TRUE(tq_value_sums_format(f));
      const Int8Levels l = int8_levels(f.levels, 1 << bits);
      const size_t stride = code_bytes(f) + 4;
      const std::vector<uint8_t> bytes = random_tq_rows(f, n, stride, rng);
      const uint8_t* rows[kInt8SumTile] = {};
      for (int i = 0; i < n; ++i) rows[i] = bytes.data() + i * stride;
      const int heads = 2;
      const std::vector<float> p = random_weights(heads, rng);
      const float correction[2] = {0.25f, 1.0f};
      std::vector<float> acc = random_vec(size_t(heads) * d, rng), before = acc;
      ASSERT_TRUE(tq_value_sums_scalar(f, rows, n, p.data(), correction, heads, l, acc.data()));
      for (int h = 0; h < heads; ++h) {
        // The byte weights, from the weights' definition.
        double top = 0;
        for (int i = 0; i < n; ++i) top = std::max(top, double(p[h * 16 + i]) * stored_scale(f, rows[i]));
        for (int c = 0; c < d; ++c) {
          double want = double(before[h * d + c]) * correction[h], mag = std::fabs(want);
          for (int i = 0; i < n; ++i) {
            const double w = double(p[h * 16 + i]) * stored_scale(f, rows[i]);
            const double w8 = std::nearbyint(w * 255.0 / top);
            const double term = w8 * (top / 255.0) * double(l.c8[code_at(rows[i], d, bits, c)]) * l.scale;
            want += term;
            mag += std::fabs(term);
          }
          EXPECT_NEAR(acc[h * d + c], want, 2e-6 * mag + 1e-12) << "head " << h << " coordinate " << c;
        }
      }
    }
}

TEST(TqValueSums, Avx512SummerIsBitIdenticalToScalar) {
  if (!tq_value_sums_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  std::mt19937 rng(8);
  int cases = 0, refused = 0;
  for (int bits : {2, 3, 4})
  for (int d : {64, 128, 256, 512})
    for (bool f16 : {false, true})
      for (int heads : {1, 3, 4, 9})
        for (int n : {1, 5, 16})
          for (int trial = 0; trial < 8; ++trial) {
            SCOPED_TRACE("bits=" + std::to_string(bits) + " d=" + std::to_string(d) + " f16=" + std::to_string(f16) +
                         " heads=" + std::to_string(heads) + " n=" + std::to_string(n) + " trial " + std::to_string(trial));
            CodedRowFormat f = format_for(tq_spec(bits), d);
            f.f16_scale = f16;
            const Int8Levels l = int8_levels(f.levels, 1 << bits);
            const int at = code_bytes(f);
            const size_t stride = at + (f16 ? 2 : 4) + 5;  // rows apart, not packed
            std::vector<uint8_t> bytes = random_tq_rows(f, n, stride, rng);
            const uint8_t* rows[kInt8SumTile] = {};
            for (int i = 0; i < n; ++i) rows[i] = bytes.data() + i * stride;
            std::vector<float> p = random_weights(heads, rng);
            const int last = heads * kInt8SumTile - kInt8SumTile + n - 1;  // the last head's last row
            if (trial == 1) std::fill(p.begin(), p.end(), 0.0f);
            if (trial == 2) p[last] = std::numeric_limits<float>::quiet_NaN();
            if (trial == 3) p[last] = std::numeric_limits<float>::infinity();
            if (trial == 4) {  // every weight tiny: 255 / the largest overflows
              for (float& x : p) x = 1e-41f;
            }
            if (trial == 5 && !f16) {  // a negative row scale
              const float s = -1.5f;
              std::memcpy(bytes.data() + (n - 1) * stride + at, &s, 4);
            }
            if (trial == 6)  // ties: the weights land on k + 0.5 steps of the largest
              for (int h = 0; h < heads; ++h)
                for (int i = 0; i < n; ++i) p[h * 16 + i] = (i == 0 ? 255.0f : float(i) * 7 + 0.5f) / stored_scale(f, rows[i]) / 255.0f;
            if (trial == 7)  // garbage in the lanes past n: ignored
              for (int h = 0; h < heads; ++h)
                for (int i = n; i < kInt8SumTile; ++i) p[h * 16 + i] = i % 2 ? std::numeric_limits<float>::quiet_NaN() : 5.0f;
            std::vector<float> correction(heads);
            for (int h = 0; h < heads; ++h) correction[h] = h % 2 ? 1.0f : 0.37f;
            const std::vector<float> start = random_vec(size_t(heads) * d, rng);
            std::vector<float> a = start, b = start;
            const bool oa = tq_value_sums_scalar(f, rows, n, p.data(), correction.data(), heads, l, a.data());
            // Odd trials lay out a full tile whose rows past n hold other codes and scales (a
            // longer query's tile, shared): they must not count.
            std::vector<uint8_t> longer = random_tq_rows(f, kInt8SumTile, stride, rng);
            const uint8_t* tile_rows[kInt8SumTile];
            for (int i = 0; i < kInt8SumTile; ++i) tile_rows[i] = i < n ? rows[i] : longer.data() + i * stride;
            if (trial % 2 && n < kInt8SumTile) {  // a NaN scale there
              const float nan = std::numeric_limits<float>::quiet_NaN();
              const uint16_t nan16 = 0x7E00;
              if (f16)
                std::memcpy(longer.data() + (kInt8SumTile - 1) * stride + at, &nan16, 2);
              else
                std::memcpy(longer.data() + (kInt8SumTile - 1) * stride + at, &nan, 4);
            }
            TqValueTile tile;
            tq_value_tile_avx512(f, tile_rows, trial % 2 ? kInt8SumTile : n, l, &tile);
            const bool ob = tq_value_sums_avx512(tile, n, p.data(), correction.data(), heads, l, b.data());
            ASSERT_EQ(oa, ob);
            if (trial >= 2 && trial <= 4) EXPECT_FALSE(oa);
            if (trial == 5 && !f16) EXPECT_FALSE(oa);
            if (!oa) {
              EXPECT_EQ(a, start);  // refused: nothing changed
              EXPECT_EQ(b, start);
              ++refused;
              continue;
            }
            ASSERT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * a.size()), 0);
            if (trial != 1) EXPECT_NE(a, start);
            ++cases;
          }
  EXPECT_EQ(cases + refused, 3 * 4 * 2 * 4 * 3 * 8);
  EXPECT_EQ(refused, 3 * 4 * 4 * 3 * (2 * 3 + 1));
  EXPECT_FALSE(tq_value_sums_format(format_for(kTq1, 64)));
  EXPECT_FALSE(tq_value_sums_format(format_for(kTq4, 192)));
  EXPECT_FALSE(tq_value_sums_format(format_for(kQ4, 64)));
}

// The kernel with int8_value_sums (f16 keys, so the scores are the fp32 kernel's) against softmax
// attention in double precision with each value row as its scale times the int8 levels. The
// weights' rounding moves each weight by at most half a step of 1/255 of its tile's largest
// weight times row scale, so the difference is held within that bound per coordinate.
TEST(TqValueSums, AttentionWithInt8SumsIsAttentionOverTheInt8Levels) {
  if (!tq_value_sums_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  std::mt19937 rng(99);
  int cases = 0;
  for (int bits : {2, 3, 4})
  for (int d : {64, 128})
    for (int group : {1, 3})
      for (int n_ctx : {1, 37, 300}) {
        SCOPED_TRACE("bits=" + std::to_string(bits) + " d=" + std::to_string(d) + " group=" + std::to_string(group) +
                     " n_ctx=" + std::to_string(n_ctx));
        const int n_kv = 2, n_q = n_kv * group;
        // Blocks of 12 rows at 37 positions: tiles of 16 that span two blocks.
        const Pages pg = build_pages(d, n_kv, n_ctx, n_ctx == 37 ? 12 : 16, kF16, tq_spec(bits), rng);
        const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
        std::vector<float> int8(size_t(n_q) * d, -3.0f), fp32(int8.size());
        PagedAttentionArgs a = make_args(pg, q.data(), n_q, int8.data());
        ASSERT_TRUE(paged_attention_fast_avx512_available(a));
        a.int8_value_sums = true;
        paged_attention_fast(a);
        paged_attention_fast(make_args(pg, q.data(), n_q, fp32.data()));
        const Int8Levels l = int8_levels(pg.v.format.levels, 1 << bits);
        float worst_excess = 0;
        for (int h = 0; h < n_q; ++h) {
          const int g = h / group;
          std::vector<double> s(n_ctx), scale(n_ctx);
          double top = -1e300;
          for (int t = 0; t < n_ctx; ++t) {
            double dot = 0;
            for (int j = 0; j < d; ++j) dot += double(q[h * d + j]) * pg.k_dec[(size_t(t) * n_kv + g) * d + j];
            s[t] = dot * a.scale;
            top = std::max(top, s[t]);
          }
          double sum = 0;
          for (int t = 0; t < n_ctx; ++t) sum += (s[t] = std::exp(s[t] - top));
          std::vector<const uint8_t*> row(n_ctx);
          for (int t = 0; t < n_ctx; ++t) {
            row[t] = pg.v_pages.data() + pg.block_table[t / pg.block_size] * pg.v.block_stride + g * pg.v.head_stride +
                     (t % pg.block_size) * pg.v.row_stride;
            scale[t] = stored_scale(pg.v.format, row[t]);
          }
          for (int c = 0; c < d; ++c) {
            double want = 0, bound = 0, mag = 0;
            for (int t0 = 0; t0 < n_ctx; t0 += 16) {
              double tile_top = 0;
              for (int t = t0; t < std::min(t0 + 16, n_ctx); ++t) tile_top = std::max(tile_top, s[t] * scale[t]);
              for (int t = t0; t < std::min(t0 + 16, n_ctx); ++t) {
                const double level = double(l.c8[code_at(row[t], d, bits, c)]) * l.scale;
                want += s[t] * scale[t] * level / sum;
                bound += 0.5 / 255.0 * tile_top * std::fabs(level) / sum;
                mag += s[t] * scale[t] * std::fabs(level) / sum;
              }
            }
            const double diff = std::fabs(int8[h * d + c] - want);
            worst_excess = std::max(worst_excess, float(diff - (bound * 1.01 + 1e-5 * mag + 1e-7)));
          }
        }
        EXPECT_LE(worst_excess, 0.0f);
        if (n_ctx > 1) EXPECT_NE(int8, fp32);  // the flag is honoured
        EXPECT_LE(relative_diff(int8, fp32), 0.05f);
        ++cases;
      }
  EXPECT_EQ(cases, 36);
}

// A tile whose weights the summer refuses (here a row with a negative scale, which no encoder
// writes) is summed in fp32 inside the attention kernel: one tile, so the whole result is the fp32
// kernel's bit for bit; with the scale positive the two differ.
TEST(TqValueSums, RefusedTileIsSummedInFp32) {
  if (!tq_value_sums_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  std::mt19937 rng(606);
  const int d = 64, n_kv = 2, group = 3, n_q = n_kv * group, n_ctx = 16;
  Pages pg = build_pages(d, n_kv, n_ctx, 16, kF16, kTq4, rng);
  const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
  const auto run = [&](bool int8) {
    std::vector<float> out(size_t(n_q) * d);
    PagedAttentionArgs a = make_args(pg, q.data(), n_q, out.data());
    a.int8_value_sums = int8;
    paged_attention_fast(a);
    return out;
  };
  EXPECT_NE(run(true), run(false));
  for (int g = 0; g < n_kv; ++g) {
    uint8_t* row = pg.v_pages.data() + pg.block_table[0] * pg.v.block_stride + g * pg.v.head_stride + 5 * pg.v.row_stride;
    ASSERT_FALSE(pg.v.format.f16_scale);
    float scale;
    std::memcpy(&scale, row + code_bytes(pg.v.format), 4);
    scale = -scale;
    std::memcpy(row + code_bytes(pg.v.format), &scale, 4);
  }
  const std::vector<float> int8 = run(true), fp32 = run(false);
  EXPECT_EQ(std::memcmp(int8.data(), fp32.data(), sizeof(float) * int8.size()), 0);
}

TEST(TqValueSums, BadArgumentsFail) {
  const CodedRowFormat f = format_for(kTq4, 64);
  const Int8Levels l = int8_levels(f.levels);
  const std::vector<uint8_t> row(64, 0);
  const uint8_t* rows[kInt8SumTile] = {};
  for (auto& r : rows) r = row.data();
  std::vector<float> p(kInt8SumTile * 2, 0.5f), acc(128), correction(2, 1.0f);
  EXPECT_THROW(tq_value_sums_scalar(f, rows, 17, p.data(), correction.data(), 1, l, acc.data()), Error);
  EXPECT_THROW(tq_value_sums_scalar(f, rows, 4, p.data(), correction.data(), 65, l, acc.data()), Error);
  EXPECT_THROW(tq_value_sums_scalar(format_for(kTq4, 96), rows, 4, p.data(), correction.data(), 1, l, acc.data()), Error);
  if (!tq_value_sums_avx512_available()) return;
  TqValueTile tile;
  EXPECT_THROW(tq_value_tile_avx512(format_for(kQ8, 64), rows, 4, l, &tile), Error);
  EXPECT_THROW(tq_value_tile_avx512(f, rows, -1, l, &tile), Error);
  tq_value_tile_avx512(f, rows, 4, l, &tile);
  EXPECT_THROW(tq_value_sums_avx512(tile, 5, p.data(), correction.data(), 1, l, acc.data()), Error);
  EXPECT_THROW(tq_value_sums_avx512(tile, -1, p.data(), correction.data(), 1, l, acc.data()), Error);
  EXPECT_TRUE(tq_value_sums_avx512(tile, 4, p.data(), correction.data(), 2, l, acc.data()));
}

// With windows and exact chunk rows a tile that is not wholly coded is summed in fp32: when no tile
// is, the result is the fp32 kernel's bit for bit; otherwise the two differ.
TEST(TqValueSums, WindowAndExactTilesKeepFp32Sums) {
  if (!tq_value_sums_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI and VBMI on this CPU";
  std::mt19937 rng(4242);
  const int d = 64, n_kv = 2, group = 3, n_q = n_kv * group, n_ctx = 100;
  const Pages p = build_pages(d, n_kv, n_ctx, 16, kTq4, kTq4, rng);
  const Pages w = build_pages(d, n_kv, n_ctx, 16, kF16, kQ8, rng);
  std::vector<int32_t> window_of(p.k_pages.size() / p.k.block_stride, -1);
  for (size_t i = 0; i < p.block_table.size(); ++i) window_of[p.block_table[i]] = w.block_table[i];
  const std::vector<float> exact_k = random_vec(size_t(n_ctx - 40) * n_kv * d, rng),
                           exact_v = random_vec(size_t(n_ctx - 40) * n_kv * d, rng);
  const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
  struct Case {
    int sink, recent, exact_from;
    bool any_coded_tile;
  };
  for (const Case& c : {Case{0, 0, 40, true}, Case{4, 24, -1, true}, Case{20, 70, 40, false}, Case{100, 0, -1, false},
                        Case{17, 0, 60, true}, Case{17, 60, -1, false}}) {
    SCOPED_TRACE("sink " + std::to_string(c.sink) + " recent " + std::to_string(c.recent) + " exact from " +
                 std::to_string(c.exact_from));
    const auto run = [&](bool int8) {
      std::vector<float> out(size_t(n_q) * d);
      PagedAttentionArgs a = make_args(p, q.data(), n_q, out.data());
      a.int8_value_sums = int8;
      if (c.sink > 0 || c.recent > 0) set_windows(a, w, window_of.data(), c.sink, c.recent);
      if (c.exact_from >= 0) {
        a.exact_from = c.exact_from;
        a.exact_k = exact_k.data();
        a.exact_v = exact_v.data();
      }
      paged_attention_fast(a);
      return out;
    };
    const std::vector<float> int8 = run(true), fp32 = run(false);
    if (c.any_coded_tile) {
      EXPECT_NE(int8, fp32);
      EXPECT_LE(relative_diff(int8, fp32), 0.05f);
    } else {
      EXPECT_EQ(std::memcmp(int8.data(), fp32.data(), sizeof(float) * int8.size()), 0);
    }
  }
}

}  // namespace
}  // namespace tq
