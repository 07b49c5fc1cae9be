// Integer scores of 2-, 3- and 4-bit TurboQuant key rows (kernels/tq_key_scores.h): the AVX-512 VNNI scorer
// gives the scalar reference's scores bit for bit; the reference is the fp32 score of the int8
// query against the int8 levels (checked in double precision); and the attention kernel with
// int8_key_scores is softmax attention over exactly those int8 forms.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/paged_attention.h"
#include "kernels/tq_key_scores.h"
#include "kernels/tq_packing.h"
#include "support/coded_pages_support.h"

namespace tq {
namespace {

using namespace coded_test;

Spec tq_spec(int bits) { return bits == 4 ? kTq4 : bits == 3 ? kTq3 : kTq2; }

TEST(TqKeyScores, QueryAndLevelsInInt8) {
  std::vector<float> q = {0.5f, -2.0f, 1.0f, 0.0f};
  std::vector<int8_t> q8(4);
  float scale = 0;
  int32_t sum = 0;
  ASSERT_TRUE(quantize_query_int8(q.data(), 4, q8.data(), &scale, &sum));
  EXPECT_FLOAT_EQ(scale, 2.0f / 127);
  EXPECT_EQ(sum, q8[0] + q8[1] + q8[2] + q8[3]);
  EXPECT_EQ(q8[1], -127);
  EXPECT_EQ(q8[2], 64);  // 63.5 to even
  EXPECT_EQ(q8[3], 0);
  std::vector<float> zeros(4, 0.0f);
  ASSERT_TRUE(quantize_query_int8(zeros.data(), 4, q8.data(), &scale, &sum));
  EXPECT_EQ(scale, 0.0f);
  EXPECT_EQ(q8, std::vector<int8_t>(4, 0));
  q[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(quantize_query_int8(q.data(), 4, q8.data(), &scale, &sum));
  q[0] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(quantize_query_int8(q.data(), 4, q8.data(), &scale, &sum));

  const Int8Levels l = int8_levels(codebook_for(64, 4).centroids.data());
  int top = 0;
  for (int k = 0; k < 16; ++k) {
    top = std::max(top, std::abs(int{l.c8[k]}));
    EXPECT_NEAR(l.c8[k] * l.scale, codebook_for(64, 4).centroids[k], 0.5f * l.scale + 1e-7f);
  }
  EXPECT_EQ(top, 127);
}

TEST(TqKeyScores, Avx512QuantizerIsBitIdenticalToScalar) {
  if (!tq_key_scores_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(3);
  for (int d : {16, 64, 128, 512})
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<float> q = random_vec(d, rng, trial % 2 ? 0.01f : 3.0f);
      if (trial == 1) std::fill(q.begin(), q.end(), 0.0f);
      if (trial == 2)  // ties: x * 127 / top lands on k + 0.5
        for (int j = 0; j < d; ++j) q[j] = (j == 0 ? 127.0f : float(j % 40) + 0.5f) * (j % 3 ? 1 : -1);
      if (trial == 3) q[d - 1] = std::numeric_limits<float>::quiet_NaN();
      if (trial == 4) q[d / 2] = -std::numeric_limits<float>::infinity();
      if (trial == 5) std::fill(q.begin(), q.end(), -0.0f);
      if (trial == 6) q[0] = 2e-37f;  // the largest magnitude: 127 / it overflows
      if (trial == 6)
        for (int j = 1; j < d; ++j) q[j] = 1e-38f * (j % 3);
      if (trial == 7)
        for (int j = 0; j < d; ++j) q[j] = 3e38f * (j % 2 ? 1 : -0.7f);
      if (trial == 8)
        for (int j = 0; j < d; ++j) q[j] = 1e-40f * j;  // denormals with a normal... none: all denormal
      std::vector<int8_t> a(d, 1), b(d, 2);
      float sa = -1, sb = -2;
      int32_t ta = -1, tb = -2;
      const bool oa = quantize_query_int8(q.data(), d, a.data(), &sa, &ta);
      const bool ob = quantize_query_int8_avx512(q.data(), d, b.data(), &sb, &tb);
      ASSERT_EQ(oa, ob) << "d=" << d << " trial " << trial;
      if (trial == 3 || trial == 4 || trial == 6 || trial == 8) EXPECT_FALSE(oa) << "d=" << d << " trial " << trial;
      if (!oa) continue;
      EXPECT_EQ(a, b) << "d=" << d << " trial " << trial;
      EXPECT_EQ(std::memcmp(&sa, &sb, sizeof sa), 0);
      EXPECT_EQ(ta, tb);
    }
}

TEST(TqKeyScores, ScalarIsTheScoreOfTheInt8Forms) {
  std::mt19937 rng(11);
  for (int bits : {2, 3, 4})
  for (int d : {64, 128}) {
    SCOPED_TRACE("bits=" + std::to_string(bits) + " d=" + std::to_string(d));
    CodedRowFormat f = format_for(tq_spec(bits), d);
    ASSERT_TRUE(tq_key_scores_format(f));
    const Int8Levels l = int8_levels(f.levels, 1 << bits);
    const size_t stride = tq_row_bytes(d, bits);
    const std::vector<uint8_t> rows = random_tq_rows(f, 20, stride, rng);
    const std::vector<float> q = random_vec(d, rng, 1.3f);
    std::vector<int8_t> q8(d);
    float q_scale = 0;
    int32_t q_sum = 0;
    ASSERT_TRUE(quantize_query_int8(q.data(), d, q8.data(), &q_scale, &q_sum));
    const float attention_scale = 1.0f / std::sqrt(float(d));
    const float factor = int8_score_factor(q_scale, l, attention_scale);
    for (int i = 0; i < 20; ++i) {
      const uint8_t* row = rows.data() + i * stride;
      float row_scale;
      std::memcpy(&row_scale, row + tq_codes_bytes(d, bits), 4);
      uint8_t idx_of[128];  // independent of the kernels' unpacking: the layout of kernels/tq_packing.h
      for (int j = 0; j < d; ++j) {
        if (bits == 4) idx_of[j] = j < d / 2 ? row[j] & 15 : row[j - d / 2] >> 4;
        const int quarter = d / 4, eighth = d / 8;
        if (bits < 4) idx_of[j] = (row[j % quarter] >> (2 * (j / quarter))) & 3;
        if (bits == 3) idx_of[j] |= ((row[quarter + j % eighth] >> (j / eighth)) & 1) << 2;
      }
      double want = 0, mag = 0;
      for (int j = 0; j < d; ++j) {
        const int idx = idx_of[j];
        const double term = double(q8[j]) * q_scale * double(l.c8[idx]) * l.scale * row_scale * attention_scale;
        want += term;
        mag += std::fabs(term);
      }
      EXPECT_NEAR(tq_key_score_scalar(f, row, q8.data(), factor, l), want, 1e-6 * mag + 1e-12);
    }
  }
}

TEST(TqKeyScores, Avx512ScorerIsBitIdenticalToScalar) {
  if (!tq_key_scores_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(5);
  int cases = 0;
  for (int bits : {2, 3, 4})
  for (int d : {64, 128, 256, 512})
    for (bool f16 : {false, true})
      for (int heads : {1, 3})
        for (int n : {1, 5, 16}) {
          SCOPED_TRACE("bits=" + std::to_string(bits) + " d=" + std::to_string(d) + " f16=" + std::to_string(f16) + " heads=" + std::to_string(heads) +
                       " n=" + std::to_string(n));
          CodedRowFormat f = format_for(tq_spec(bits), d);
          f.f16_scale = f16;
          const Int8Levels l = int8_levels(f.levels, 1 << bits);
          const size_t stride = tq_codes_bytes(d, bits) + (f16 ? 2 : 4) + 7;  // rows apart, not packed
          const std::vector<uint8_t> bytes = random_tq_rows(f, n, stride, rng);
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
              EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << "head " << h << " row " << i << ": " << got
                                                                 << " against " << want;
            }
          ++cases;
        }
  EXPECT_EQ(cases, 144);
  EXPECT_FALSE(tq_key_scores_format(format_for(kTq1, 64)));
  EXPECT_FALSE(tq_key_scores_format(format_for(kSplit43, 64)));
  EXPECT_FALSE(tq_key_scores_format(format_for(kTq4, 192)));
  EXPECT_FALSE(tq_key_scores_format(format_for(kQ4, 64)));
}

// The kernel with int8_key_scores against softmax attention in double precision over the int8
// forms: each query head as quantize_query_int8 gives it, each key row as its scale times the int8
// levels (no windows or exact rows here: WindowAndExactRowsKeepFp32Scores covers them). `levels`
// replaces the pages' codebook when given (the rows keep their indices).
void check_int8_scores(const Pages& p, int bits, int group, std::mt19937& rng, const float* levels = nullptr) {
  const int d = p.k.format.dim, n_kv = 2, n_q = n_kv * group, n_ctx = p.n_ctx;
  const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
  std::vector<float> fp32(size_t(n_q) * d), int8(fp32.size(), -3.0f), ref(fp32.size());
  PagedAttentionArgs a = make_args(p, q.data(), n_q, int8.data());
  PagedAttentionArgs b = make_args(p, q.data(), n_q, fp32.data());
  if (levels) a.k.format.levels = b.k.format.levels = levels;
  ASSERT_TRUE(paged_attention_fast_avx512_available(a));
  a.int8_key_scores = true;
  paged_attention_fast(a);
  paged_attention_fast(b);
  // The int8 forms.
  const Int8Levels l = int8_levels(a.k.format.levels, 1 << bits);
  float levels8[16];
  for (int k = 0; k < 16; ++k) levels8[k] = l.c8[k] * l.scale;
  CodedRowFormat f8 = p.k.format;
  f8.levels = levels8;
  std::vector<float> q_int8(q.size()), k_int8(p.k_dec.size());
  for (int h = 0; h < n_q; ++h) {
    int8_t q8[512];
    float q_scale;
    int32_t q_sum;
    ASSERT_TRUE(quantize_query_int8(q.data() + h * d, d, q8, &q_scale, &q_sum));
    for (int j = 0; j < d; ++j) q_int8[h * d + j] = q8[j] * q_scale;
  }
  for (int t = 0; t < n_ctx; ++t)
    for (int g = 0; g < n_kv; ++g) {
      const uint8_t* row = p.k_pages.data() + p.block_table[t / p.block_size] * p.k.block_stride +
                           g * p.k.head_stride + (t % p.block_size) * p.k.row_stride;
      decode_coded_row_scalar(f8, row, k_int8.data() + (size_t(t) * n_kv + g) * d);
    }
  attention_reference(q_int8.data(), k_int8.data(), p.v_dec.data(), n_q, n_kv, d, n_ctx, a.scale, ref.data());
  EXPECT_LE(relative_diff(int8, ref), 1e-5f);
  if (n_ctx > 1) EXPECT_NE(int8, fp32);  // the flag is honoured
  EXPECT_LE(relative_diff(int8, fp32), 0.05f);
}

TEST(TqKeyScores, AttentionWithInt8ScoresIsAttentionOverTheInt8Forms) {
  std::mt19937 rng(77);
  if (!tq_key_scores_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  int cases = 0;
  for (int bits : {2, 3, 4})
  for (int d : {64, 128})
    for (int group : {1, 3, 4})
      for (int n_ctx : {1, 37, 300}) {
        SCOPED_TRACE("bits=" + std::to_string(bits) + " d=" + std::to_string(d) + " group=" + std::to_string(group) + " n_ctx=" + std::to_string(n_ctx));
        // Blocks of 12 rows at 37 positions: tiles of 16 that span two blocks.
        const int block_size = n_ctx == 300 ? 128 : n_ctx == 37 ? 12 : 16;
        check_int8_scores(build_pages(d, 2, n_ctx, block_size, tq_spec(bits), kF16, rng), bits, group, rng);
        ++cases;
      }
  EXPECT_EQ(cases, 54);
}

// The kernel keeps the int8 tables of the last codebooks it saw: a table rewritten in place, and
// a third table after two others, must be rounded afresh.
TEST(TqKeyScores, Int8TablesFollowTheCodebookContents) {
  std::mt19937 rng(78);
  if (!tq_key_scores_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const Pages p = build_pages(64, 2, 70, 16, tq_spec(4), kF16, rng);
  float levels[16];
  std::copy(p.k.format.levels, p.k.format.levels + 16, levels);
  check_int8_scores(p, 4, 3, rng, levels);
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    for (int k = 0; k < 16; ++k) levels[k] = levels[k] * 0.9f + (k % 3 == round ? 0.01f : -0.005f);  // same address
    check_int8_scores(p, 4, 3, rng, levels);
    check_int8_scores(build_pages(128, 2, 70, 16, tq_spec(2 + round % 2), kF16, rng), 2 + round % 2, 3, rng);
  }
}

// Softmax attention in double precision of one query head against rows each with its own query
// form: row t's score is q_row[t] . k[t] * scale.
std::vector<double> attention_per_row(const std::vector<const float*>& q_row, const std::vector<const float*>& k,
                                      const std::vector<const float*>& v, int d, double scale) {
  const size_t n = k.size();
  std::vector<double> s(n), out(d, 0.0);
  double top = -1e300, sum = 0;
  for (size_t t = 0; t < n; ++t) {
    double dot = 0;
    for (int j = 0; j < d; ++j) dot += double(q_row[t][j]) * k[t][j];
    s[t] = dot * scale;
    top = std::max(top, s[t]);
  }
  for (size_t t = 0; t < n; ++t) sum += (s[t] = std::exp(s[t] - top));
  for (size_t t = 0; t < n; ++t)
    for (int j = 0; j < d; ++j) out[j] += s[t] * v[t][j] / sum;
  return out;
}

// With full-precision windows and exact chunk rows: a tile of 16 positions that a query reads
// wholly from the coded pages gets int8 scores, any other tile fp32 scores of the rows as they are
// read (window copies, exact rows, coded rows decoded). Checked against that, row by row, in
// double precision; and a query none of whose tiles is wholly coded gets the fp32 kernel's bits.
TEST(TqKeyScores, WindowAndExactRowsKeepFp32Scores) {
  if (!tq_key_scores_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(2024);
  const int d = 64, n_kv = 2, group = 3, n_q = n_kv * group, n_ctx = 200;
  const Pages p = build_pages(d, n_kv, n_ctx, 16, kTq4, kTq4, rng);
  const Pages w = build_pages(d, n_kv, n_ctx, 16, kF16, kQ8, rng);
  std::vector<int32_t> window_of(p.k_pages.size() / p.k.block_stride, -1);
  for (size_t i = 0; i < p.block_table.size(); ++i) window_of[p.block_table[i]] = w.block_table[i];
  const int exact_from = 150;
  const std::vector<float> exact_k = random_vec(size_t(n_ctx - exact_from) * n_kv * d, rng),
                           exact_v = random_vec(size_t(n_ctx - exact_from) * n_kv * d, rng);
  const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
  struct Case {
    int sink, recent;
    bool exact;
  };
  for (const Case& c : {Case{4, 24, false}, Case{5, 40, true}, Case{0, 0, true}, Case{200, 0, false}, Case{0, 200, true}}) {
    SCOPED_TRACE("sink " + std::to_string(c.sink) + " recent " + std::to_string(c.recent) + " exact " +
                 std::to_string(c.exact));
    const auto args = [&](float* out, bool int8) {
      PagedAttentionArgs a = make_args(p, q.data(), n_q, out);
      a.int8_key_scores = int8;
      if (c.sink > 0 || c.recent > 0) set_windows(a, w, window_of.data(), c.sink, c.recent);
      if (c.exact) {
        a.exact_from = exact_from;
        a.exact_k = exact_k.data();
        a.exact_v = exact_v.data();
      }
      return a;
    };
    std::vector<float> int8(size_t(n_q) * d), fp32(int8.size());
    const PagedAttentionArgs a = args(int8.data(), true);
    paged_attention_fast(a);
    paged_attention_fast(args(fp32.data(), false));
    const auto in_window = [&](int t) { return a.windows && (t < a.coded_begin || t >= a.coded_end); };
    const auto is_exact = [&](int t) { return c.exact && t >= exact_from; };
    bool any_coded_tile = false;
    for (int t0 = 0; t0 < n_ctx; t0 += 16) {
      bool coded = true;
      for (int t = t0; t < std::min(t0 + 16, n_ctx); ++t) coded = coded && !in_window(t) && !is_exact(t);
      any_coded_tile = any_coded_tile || coded;
    }
    if (!any_coded_tile) {
      EXPECT_EQ(std::memcmp(int8.data(), fp32.data(), sizeof(float) * int8.size()), 0);
      continue;
    }
    EXPECT_NE(int8, fp32);
    // The reference, head by head.
    const Int8Levels l = int8_levels(p.k.format.levels);
    float levels8[16];
    for (int k = 0; k < 16; ++k) levels8[k] = l.c8[k] * l.scale;
    CodedRowFormat f8 = p.k.format;
    f8.levels = levels8;
    std::vector<float> k_int8(p.k_dec.size());
    for (int t = 0; t < n_ctx; ++t)
      for (int g = 0; g < n_kv; ++g)
        decode_coded_row_scalar(f8, p.k_pages.data() + p.block_table[t / 16] * p.k.block_stride + g * p.k.head_stride +
                                        (t % 16) * p.k.row_stride,
                                k_int8.data() + (size_t(t) * n_kv + g) * d);
    float worst = 0, mag = 0;
    for (int h = 0; h < n_q; ++h) {
      const int g = h / group;
      int8_t q8[64];
      float q_scale;
      int32_t q_sum;
      ASSERT_TRUE(quantize_query_int8(q.data() + h * d, d, q8, &q_scale, &q_sum));
      std::vector<float> q_int8(d);
      for (int j = 0; j < d; ++j) q_int8[j] = q8[j] * q_scale;
      std::vector<const float*> q_row(n_ctx), k_row(n_ctx), v_row(n_ctx);
      for (int t = 0; t < n_ctx; ++t) {
        const size_t at = (size_t(t) * n_kv + g) * d;
        const int t0 = t / 16 * 16;
        bool coded = true;
        for (int u = t0; u < std::min(t0 + 16, n_ctx); ++u) coded = coded && !in_window(u) && !is_exact(u);
        if (is_exact(t)) {
          const size_t e = (size_t(t - exact_from) * n_kv + g) * d;
          k_row[t] = exact_k.data() + e;
          v_row[t] = exact_v.data() + e;
        } else if (in_window(t)) {
          k_row[t] = w.k_dec.data() + at;
          v_row[t] = w.v_dec.data() + at;
        } else {
          k_row[t] = coded ? k_int8.data() + at : p.k_dec.data() + at;
          v_row[t] = p.v_dec.data() + at;
        }
        q_row[t] = coded ? q_int8.data() : q.data() + h * d;
      }
      const std::vector<double> ref = attention_per_row(q_row, k_row, v_row, d, a.scale);
      for (int j = 0; j < d; ++j) {
        worst = std::max(worst, float(std::fabs(ref[j] - int8[h * d + j])));
        mag = std::max(mag, float(std::fabs(ref[j])));
      }
    }
    EXPECT_LE(worst, 1e-5f * mag);
  }
}

}  // namespace
}  // namespace tq
