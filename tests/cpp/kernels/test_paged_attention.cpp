// Coded paged attention (kernels/paged_attention.h) over rows of every stored format
// (kernels/coded_row.h): in storage space it equals ordinary attention over the rows decoded by
// decode_coded_row_scalar, for every codec, bit width, head size, GQA grouping, context length,
// block size and mix of K/V formats; the AVX2 row decoders are bit-identical to the scalar ones;
// the AVX2 kernel equals the scalar one; bad arguments fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "support/coded_pages_support.h"
#include "errors/error.h"
#include "kernels/paged_attention.h"
#include "kernels/coded_row.h"
#include "kernels/dequantize.h"
#include "kernels/tq_packing.h"
#include "quant/baseline_quant.h"
#include "quant/codebook.h"
#include "quant/rotation.h"
#include "quant/tq_row.h"

namespace tq {
namespace {

using namespace coded_test;

// Scalar kernel against attention_reference (double) over the scalar-decoded rows.
void check_against_reference(const Spec& ks, const Spec& vs, int d, int group, int n_ctx, int block_size,
                             std::mt19937& rng) {
  SCOPED_TRACE("k=" + spec_name(ks) + " v=" + spec_name(vs) + " d=" + std::to_string(d) + " group=" +
               std::to_string(group) + " n_ctx=" + std::to_string(n_ctx) + " block_size=" + std::to_string(block_size));
  const int n_kv = 2, n_q = n_kv * group;
  const Pages p = build_pages(d, n_kv, n_ctx, block_size, ks, vs, rng);
  const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 1.5f);
  std::vector<float> out(size_t(n_q) * d, -7.0f), ref(out.size());
  paged_attention_exact_scalar(make_args(p, q.data(), n_q, out.data()));
  attention_reference(q.data(), p.k_dec.data(), p.v_dec.data(), n_q, n_kv, d, n_ctx, 1.0f / std::sqrt(float(d)),
                      ref.data());
  EXPECT_LE(relative_diff(out, ref), 1e-5f);
}

// ---------------------------------------------------------------------------------------------
// Row formats

TEST(CodedRow, Bytes) {
  EXPECT_EQ(coded_row_bytes(format_for(kF32, 64)), 256u);
  EXPECT_EQ(coded_row_bytes(format_for(kBF16, 64)), 128u);
  EXPECT_EQ(coded_row_bytes(format_for(kF16, 48)), 96u);
  EXPECT_EQ(coded_row_bytes(format_for(kQ8, 128)), 4u * 34);
  EXPECT_EQ(coded_row_bytes(format_for(kQ4, 128)), 4u * 18);
  EXPECT_EQ(coded_row_bytes(format_for(kTq4, 128)), 68u);
  EXPECT_EQ(coded_row_bytes(format_for(kTq3, 128)), 52u);
  EXPECT_EQ(coded_row_bytes(format_for(kTq2, 128)), 36u);
  EXPECT_EQ(coded_row_bytes(format_for(kSplit43, 128)), 32u + 24 + 4);
  EXPECT_EQ(coded_row_bytes(format_for(kSplit32, 64)), 12u + 8 + 4);
}

TEST(CodedRow, FormatChecks) {
  for (const Spec& s : kAllSpecs) EXPECT_NO_THROW(check_coded_row_format(format_for(s, 128))) << spec_name(s);
  CodedRowFormat f = format_for(kF16, 0);
  EXPECT_THROW(check_coded_row_format(f), Error);
  f.dim = 513;
  EXPECT_THROW(check_coded_row_format(f), Error);
  EXPECT_THROW(check_coded_row_format(format_for(kQ8, 48)), Error);
  EXPECT_THROW(check_coded_row_format(format_for(kQ4, 80)), Error);
  CodedRowFormat t = format_for(kTq3, 128);
  t.dim = 36;  // 3 bits need a multiple of 8
  EXPECT_THROW(check_coded_row_format(t), Error);
  t = format_for(kTq4, 128);
  t.bits = 5;
  EXPECT_THROW(check_coded_row_format(t), Error);
  t = format_for(kTq4, 128);
  t.levels = nullptr;
  EXPECT_THROW(check_coded_row_format(t), Error);
  t = format_for(kSplit43, 128);
  t.levels_lo = nullptr;
  EXPECT_THROW(check_coded_row_format(t), Error);
  t = format_for(kSplit43, 128);
  t.dim = 72;  // halves of 36: fine for 4 bits, not for 3
  EXPECT_THROW(check_coded_row_format(t), Error);
}

// The scalar decoder agrees with the encoders' own decoders: tq_decode_row_rotated for TQ, the
// same per half with fp16 scales for split rows, dequantize_row for the ggml blocks.
TEST(CodedRow, ScalarDecodeMatchesOtherDecoders) {
  std::mt19937 rng(11);
  for (int d : {64, 128}) {
    const std::vector<float> x = random_vec(d, rng, 0.7f);
    std::vector<uint8_t> row(1024);
    std::vector<float> got(d), want(d);
    for (int bits = 1; bits <= 4; ++bits) {
      const Spec s{RowCodec::TQ, bits};
      encode_row(s, d, x.data(), row.data());
      decode_coded_row_scalar(format_for(s, d), row.data(), got.data());
      tq_decode_row_rotated(row.data(), codebook_for(d, bits), want.data());
      EXPECT_EQ(got, want) << "bits " << bits;
    }
    for (const Spec& s : {kSplit43, kSplit32}) {
      encode_row(s, d, x.data(), row.data());
      decode_coded_row_scalar(format_for(s, d), row.data(), got.data());
      const int h = d / 2;
      const size_t hi = tq_codes_bytes(h, s.bits), lo = tq_codes_bytes(h, s.bits_lo);
      uint16_t scales[2];
      std::memcpy(scales, row.data() + hi + lo, 4);
      std::vector<uint8_t> idx(h);
      unpack_indices(row.data(), h, s.bits, idx.data());
      for (int j = 0; j < h; ++j) want[j] = codebook_for(h, s.bits).centroids[idx[j]] * fp16_to_fp32(scales[0]);
      unpack_indices(row.data() + hi, h, s.bits_lo, idx.data());
      for (int j = 0; j < h; ++j) want[h + j] = codebook_for(h, s.bits_lo).centroids[idx[j]] * fp16_to_fp32(scales[1]);
      EXPECT_EQ(got, want) << spec_name(s);
      // The row's norm survives: each half is norm-corrected, the scales are fp16.
      double n_got = 0, n_x = 0;
      for (int j = 0; j < d; ++j) n_got += double(got[j]) * got[j], n_x += double(x[j]) * x[j];
      EXPECT_NEAR(std::sqrt(n_got), std::sqrt(n_x), 1e-3 * std::sqrt(n_x)) << spec_name(s);
    }
    for (auto [s, type] : {std::pair{kQ8, DType::Q8_0}, std::pair{kQ4, DType::Q4_0}, std::pair{kF16, DType::F16}}) {
      encode_row(s, d, x.data(), row.data());
      decode_coded_row_scalar(format_for(s, d), row.data(), got.data());
      dequantize_row(type, row.data(), want.data(), d);
      EXPECT_EQ(got, want) << spec_name(s);
    }
  }
}

// The AVX2 and AVX-512 row decoders are bit-identical to the scalar ones, on encoded rows and
// on random codes, for sizes that take the SIMD paths (64, 128, 256) and ones that fall back per
// part (48, 96, 40); the AVX-512 ones also three rows in one call, rows apart by a stride.
TEST(CodedRow, SimdDecodeIsBitIdenticalToScalar) {
  if (!coded_row_avx2_available(format_for(kF32, 64))) GTEST_SKIP() << "no AVX2+FMA+F16C on this CPU";
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-3.0f, 3.0f);
  int checked = 0, wide = 0;
  for (int d : {64, 128, 256, 96, 48, 40}) {
    for (const Spec& s : kAllSpecs) {
      if (!spec_fits(s, d)) continue;
      const CodedRowFormat f = format_for(s, d);
      ASSERT_TRUE(coded_row_avx2_available(f));
      const size_t bytes = coded_row_bytes(f);
      std::vector<uint8_t> row(bytes);
      std::vector<float> a(d), b(d);
      for (int trial = 0; trial < 20; ++trial) {
        if (trial % 2 == 0) {
          const std::vector<float> x = random_vec(d, rng, trial + 0.5f);
          encode_row(s, d, x.data(), row.data());
        } else {  // random codes; scales kept finite (a NaN's payload is not part of the contract)
          for (uint8_t& c : row) c = uint8_t(byte(rng));
          if (s.codec == RowCodec::F32) {
            for (int j = 0; j < d; ++j) {
              const float v = scale(rng);
              std::memcpy(row.data() + 4 * j, &v, 4);
            }
          } else if (s.codec == RowCodec::BF16 || s.codec == RowCodec::F16) {
            for (int j = 0; j < d; ++j) row[2 * j + 1] &= 0x3F;  // exponent well below inf / NaN
          } else if (s.codec == RowCodec::Q8_0 || s.codec == RowCodec::Q4_0) {
            const size_t block = s.codec == RowCodec::Q8_0 ? 34 : 18;
            for (size_t o = 0; o < bytes; o += block) {
              const uint16_t h = fp32_to_fp16(scale(rng));
              std::memcpy(row.data() + o, &h, 2);
            }
          } else if (s.codec == RowCodec::TQ) {
            const float v = scale(rng);
            std::memcpy(row.data() + tq_codes_bytes(d, s.bits), &v, 4);
          } else {
            const size_t codes = tq_split_codes_bytes(d, s.bits, s.bits_lo);
            const uint16_t h[2] = {fp32_to_fp16(scale(rng)), fp32_to_fp16(scale(rng))};
            std::memcpy(row.data() + codes, h, 4);
          }
        }
        std::fill(a.begin(), a.end(), 1e30f);
        std::fill(b.begin(), b.end(), -1e30f);
        decode_coded_row_scalar(f, row.data(), a.data());
        decode_coded_row_avx2(f, row.data(), b.data());
        ASSERT_EQ(std::memcmp(a.data(), b.data(), sizeof(float) * d), 0)
            << spec_name(s) << " d=" << d << " trial " << trial;
        ++checked;
        if (!coded_row_avx512_available(f)) continue;
        std::vector<uint8_t> rows(3 * (bytes + 5));
        for (int r = 0; r < 3; ++r) std::memcpy(rows.data() + r * (bytes + 5), row.data(), bytes);
        std::vector<float> c(3 * size_t(d + 3), -2e30f);
        decode_coded_rows_avx512(f, rows.data(), bytes + 5, 3, c.data(), d + 3);
        for (int r = 0; r < 3; ++r)
          ASSERT_EQ(std::memcmp(a.data(), c.data() + r * (d + 3), sizeof(float) * d), 0)
              << "AVX-512 " << spec_name(s) << " d=" << d << " trial " << trial << " row " << r;
        ++wide;
      }
    }
  }
  EXPECT_GT(checked, 300);
  if (__builtin_cpu_supports("avx512f")) EXPECT_GT(wide, 250);
}

// ---------------------------------------------------------------------------------------------
// Attention: scalar kernel against the reference, one codec on both sides

struct Case {
  Spec spec;
  int d;
};

class CodedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(CodedAttentionTest, ScalarMatchesReferenceOverDecodedRows) {
  const auto [spec, d] = GetParam();
  std::mt19937 rng(1000 + d * 31 + int(spec.codec) * 7 + spec.bits);
  for (int group : {1, 4}) {
    for (int n_ctx : {1, 37, 300}) {
      for (int block_size : {1, 16, 128}) check_against_reference(spec, spec, d, group, n_ctx, block_size, rng);
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (int d : {64, 128, 96, 48}) {
    for (const Spec& s : kAllSpecs)
      if (spec_fits(s, d)) cases.push_back({s, d});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, CodedAttentionTest, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return spec_name(info.param.spec) + "_d" + std::to_string(info.param.d);
                         });

TEST(CodedAttention, EveryCodecIsCovered) {
  // Each codec and each TurboQuant width appears at 64 and 128, 3 bits at 96 (scalar fallback).
  int at64 = 0, at128 = 0;
  for (const Case& c : all_cases()) at64 += c.d == 64, at128 += c.d == 128;
  EXPECT_EQ(at64, int(kAllSpecs.size()));
  EXPECT_EQ(at128, int(kAllSpecs.size()));
}

const std::vector<std::pair<Spec, Spec>> kMixed = {
    {kF16, kTq4}, {kTq4, kQ8}, {kSplit43, kTq2}, {kQ4, kBF16}, {kTq3, kSplit32}, {kF32, kQ4}, {kSplit32, kF16},
};

TEST(CodedAttention, MixedKeyValueFormats) {
  std::mt19937 rng(77);
  for (int d : {64, 128}) {
    for (const auto& [ks, vs] : kMixed) {
      check_against_reference(ks, vs, d, 3, 100, 16, rng);
      check_against_reference(ks, vs, d, 1, 17, 1, rng);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Attention: the AVX2 and AVX-512 kernels and the dispatch against the scalar kernel

TEST(CodedAttention, SimdKernelsMatchScalar) {
  std::mt19937 rng(4242);
  {
    Pages p = build_pages(64, 1, 3, 16, kTq4, kTq4, rng);
    std::vector<float> q(64), out(64);
    if (!paged_attention_fast_avx2_available(make_args(p, q.data(), 1, out.data())))
      GTEST_SKIP() << "no AVX2+FMA+F16C on this CPU";
  }
  int cases = 0, wide_cases = 0;
  for (int d : {64, 128, 96, 48}) {
    std::vector<std::pair<Spec, Spec>> pairs;
    for (const Spec& s : kAllSpecs)
      if (spec_fits(s, d)) pairs.push_back({s, s});
    for (const auto& m : kMixed)
      if (spec_fits(m.first, d) && spec_fits(m.second, d)) pairs.push_back(m);
    for (const auto& [ks, vs] : pairs) {
      for (int group : {1, 3, 8}) {
        for (int n_ctx : {1, 37, 300}) {
          SCOPED_TRACE("k=" + spec_name(ks) + " v=" + spec_name(vs) + " d=" + std::to_string(d) + " group=" +
                       std::to_string(group) + " n_ctx=" + std::to_string(n_ctx));
          const int n_kv = 2, n_q = n_kv * group;
          const Pages p = build_pages(d, n_kv, n_ctx, n_ctx == 300 ? 128 : 16, ks, vs, rng);
          const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
          std::vector<float> scalar(size_t(n_q) * d), simd(scalar.size(), -3.0f), dispatch(scalar.size(), -5.0f);
          std::vector<float> wide(scalar.size(), -7.0f);
          const PagedAttentionArgs a = make_args(p, q.data(), n_q, scalar.data());
          ASSERT_TRUE(paged_attention_fast_avx2_available(a));
          paged_attention_exact_scalar(a);
          paged_attention_fast_avx2(make_args(p, q.data(), n_q, simd.data()));
          paged_attention_fast(make_args(p, q.data(), n_q, dispatch.data()));
          EXPECT_LE(relative_diff(simd, scalar), 1e-5f);
          if (paged_attention_fast_avx512_available(a)) {
            paged_attention_fast_avx512(make_args(p, q.data(), n_q, wide.data()));
            EXPECT_LE(relative_diff(wide, scalar), 1e-5f);
            EXPECT_EQ(dispatch, wide);
            ++wide_cases;
          } else {
            EXPECT_EQ(dispatch, simd);
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 300);
  if (__builtin_cpu_supports("avx512f")) EXPECT_GT(wide_cases, 200);  // d = 64, 128, 96, 48
}

// The FP cache's kernel (the plain loop with SIMD decoding and lane-parallel but unreordered
// dot products) gives the plain scalar kernel's result bit for bit, for every codec, head size
// (multiples of 8 take the SIMD path, 36 the plain one) and context length (8-position groups
// and their tails).
TEST(CodedAttention, ExactKernelIsBitIdenticalToExactScalar) {
  std::mt19937 rng(99);
  int cases = 0;
  for (int d : {64, 128, 96, 36, 8, 16}) {
    for (const Spec& s : kAllSpecs) {
      if (!spec_fits(s, d)) continue;
      for (int n_ctx : {1, 7, 8, 9, 64, 301}) {
        SCOPED_TRACE(spec_name(s) + " d=" + std::to_string(d) + " n_ctx=" + std::to_string(n_ctx));
        const int n_kv = 2, n_q = 6;
        const Pages p = build_pages(d, n_kv, n_ctx, 16, s, s, rng);
        const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
        std::vector<float> plain(size_t(n_q) * d), exact(plain.size(), -1.0f);
        paged_attention_exact_scalar(make_args(p, q.data(), n_q, plain.data()));
        paged_attention_exact(make_args(p, q.data(), n_q, exact.data()));
        ASSERT_EQ(0, std::memcmp(plain.data(), exact.data(), plain.size() * sizeof(float)));
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 100);
}

// A prefill chunk's own rows passed unquantized (exact_from): positions before it come from the
// pages, positions from it on from the exact arrays, in every kernel (exact bit-identical
// to exact scalar), for chunks that start mid-block, at 0 and at the last position.
TEST(CodedAttention, ExactChunkRowsReplaceTheTailOfThePages) {
  std::mt19937 rng(515);
  for (int d : {64, 36}) {
    for (const auto& [ks, vs] : std::vector<std::pair<Spec, Spec>>{{kTq4, kTq4}, {kSplit43, kQ8}, {kF16, kTq3}}) {
      if (!spec_fits(ks, d) || !spec_fits(vs, d)) continue;
      for (int exact_from : {0, 21, 49}) {
        SCOPED_TRACE("k=" + spec_name(ks) + " v=" + spec_name(vs) + " d=" + std::to_string(d) +
                     " exact_from=" + std::to_string(exact_from));
        const int n_kv = 2, n_q = 6, n_ctx = 50;
        const Pages p = build_pages(d, n_kv, n_ctx, 16, ks, vs, rng);
        const size_t tail = size_t(n_ctx - exact_from) * n_kv * d;
        const std::vector<float> exact_k = random_vec(tail, rng), exact_v = random_vec(tail, rng);
        std::vector<float> k_all = p.k_dec, v_all = p.v_dec;
        std::copy(exact_k.begin(), exact_k.end(), k_all.begin() + size_t(exact_from) * n_kv * d);
        std::copy(exact_v.begin(), exact_v.end(), v_all.begin() + size_t(exact_from) * n_kv * d);
        const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 1.5f);
        std::vector<float> ref(size_t(n_q) * d);
        attention_reference(q.data(), k_all.data(), v_all.data(), n_q, n_kv, d, n_ctx, 1.0f / std::sqrt(float(d)),
                            ref.data());
        const auto args = [&](float* out) {
          PagedAttentionArgs a = make_args(p, q.data(), n_q, out);
          a.exact_from = exact_from;
          a.exact_k = exact_k.data();
          a.exact_v = exact_v.data();
          return a;
        };
        expect_kernels_match(args, ref);
      }
    }
  }
  std::vector<float> q(64), out(64), rows(64);
  Pages p = build_pages(64, 1, 4, 16, kTq4, kTq4, rng);
  PagedAttentionArgs a = make_args(p, q.data(), 1, out.data());
  a.exact_from = 2;  // rows missing
  EXPECT_THROW(paged_attention_exact_scalar(a), Error);
  a.exact_k = a.exact_v = rows.data();
  a.exact_from = 5;  // past n_ctx
  EXPECT_THROW(paged_attention_exact_scalar(a), Error);
}

// head_dim 36 is no multiple of 8: no AVX2 kernel, and dispatch runs the scalar one.
// The context attended in parts (split at various points, an empty part included) and the
// parts combined gives the whole call's result, in the scalar and AVX2 kernels, with a prefill
// chunk's exact rows spanning a split; the FP path's kernel refuses parts.
TEST(CodedAttention, PartsCombineToTheWholeContext) {
  std::mt19937 rng(31);
  using Kernel = void (*)(const PagedAttentionArgs&);
  for (Kernel kernel : std::vector<Kernel>{paged_attention_exact_scalar, paged_attention_fast}) {
    for (const Spec& s : {kTq4, kQ8}) {
      const int d = 64, n_kv = 2, group = 3, n_q = n_kv * group, n_ctx = 301;
      const Pages p = build_pages(d, n_kv, n_ctx, 16, s, s, rng);
      const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
      const std::vector<float> exact_k = random_vec(size_t(n_ctx - 250) * n_kv * d, rng),
                               exact_v = random_vec(exact_k.size(), rng);
      for (bool exact : {false, true}) {
        for (const std::vector<int>& cuts : std::vector<std::vector<int>>{{0, 301}, {0, 256, 301}, {0, 7, 7, 260, 301}}) {
          SCOPED_TRACE(spec_name(s) + " exact " + std::to_string(exact) + " parts " + std::to_string(cuts.size() - 1));
          auto args = [&](float* out) {
            PagedAttentionArgs a = make_args(p, q.data(), n_q, out);
            if (exact) a.exact_from = 250, a.exact_k = exact_k.data(), a.exact_v = exact_v.data();
            return a;
          };
          std::vector<float> whole(size_t(n_q) * d), combined(whole.size(), -1.0f);
          kernel(args(whole.data()));
          const int parts = static_cast<int>(cuts.size()) - 1;
          std::vector<float> part_out(size_t(parts) * n_q * d, -3.0f), part_max(size_t(parts) * n_q), part_sum(part_max.size());
          for (int i = 0; i < parts; ++i) {
            PagedAttentionArgs a = args(part_out.data() + size_t(i) * n_q * d);
            a.ctx_begin = cuts[i];
            a.n_ctx = cuts[i + 1];
            if (exact) a.exact_from = std::min(a.exact_from, a.n_ctx);
            a.partial_max = part_max.data() + size_t(i) * n_q;
            a.partial_sum = part_sum.data() + size_t(i) * n_q;
            kernel(a);
          }
          combine_attention_parts(parts, part_out.data(), size_t(n_q) * d, part_max.data(), part_sum.data(), n_q, n_q, d,
                                  combined.data());
          EXPECT_LE(relative_diff(combined, whole), 2e-6f);
        }
      }
      PagedAttentionArgs a = make_args(p, q.data(), n_q, std::vector<float>(size_t(n_q) * d).data());
      a.ctx_begin = n_ctx + 1;
      EXPECT_THROW(kernel(a), Error);
    }
  }
  const Pages p = build_pages(64, 1, 40, 16, kF16, kF16, rng);
  std::vector<float> q(64), out(64), m(1), sum(1);
  PagedAttentionArgs a = make_args(p, q.data(), 1, out.data());
  a.ctx_begin = 16;
  EXPECT_THROW(paged_attention_exact(a), Error);
  a.ctx_begin = 0;
  a.partial_max = m.data();
  EXPECT_THROW(paged_attention_exact_scalar(a), Error);  // partial_sum missing
  a.partial_sum = sum.data();
  EXPECT_THROW(paged_attention_exact(a), Error);
}

// The AVX-512 combination of parts is the scalar one bit for bit: head_dim 64, 128 and 256 (past
// the 128 elements it keeps in registers), an empty part (-inf, its outputs never read), parts
// whose maxima differ widely, a head whose every part is empty (zeros).
TEST(CodedAttention, CombiningPartsWithAvx512MatchesTheScalarLoopBitForBit) {
  if (!combine_attention_parts_avx512_available(64)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (int d : {64, 128, 256}) {
    const int parts = 7, heads = 3;
    std::vector<float> part_out(size_t(parts) * heads * d), part_max(size_t(parts) * heads), part_sum(part_max.size());
    for (float& x : part_out) x = normal(rng);
    for (float& x : part_max) x = 6.0f * normal(rng);
    for (float& x : part_sum) x = 1.0f + std::fabs(normal(rng)) * 40.0f;
    const float inf = std::numeric_limits<float>::infinity();
    part_max[size_t(2) * heads + 1] = -inf;  // head 1's part 2 is empty: its garbage must not count
    part_out[(size_t(2) * heads + 1) * d] = std::numeric_limits<float>::quiet_NaN();
    for (int p = 0; p < parts; ++p) part_max[size_t(p) * heads + 2] = -inf;  // head 2: every part empty
    std::vector<float> scalar(size_t(heads) * d, -1.0f), simd(scalar.size(), -2.0f);
    combine_attention_parts_scalar(parts, part_out.data(), size_t(heads) * d, part_max.data(), part_sum.data(), heads,
                                   heads, d, scalar.data());
    combine_attention_parts_avx512(parts, part_out.data(), size_t(heads) * d, part_max.data(), part_sum.data(), heads,
                                   heads, d, simd.data());
    SCOPED_TRACE("head_dim " + std::to_string(d));
    EXPECT_EQ(std::memcmp(scalar.data(), simd.data(), scalar.size() * sizeof(float)), 0);
    EXPECT_TRUE(std::all_of(scalar.begin(), scalar.end(), [](float x) { return std::isfinite(x); }));
    EXPECT_EQ(scalar[size_t(2) * d], 0.0f);
  }
  std::vector<float> out(48);
  EXPECT_THROW(combine_attention_parts_avx512(1, out.data(), 48, out.data(), out.data(), 1, 1, 48 - 1, out.data()), Error);
}

// Computing KV heads one range at a time (as the model does across threads) gives the result
// of one call over all heads bit for bit, in every kernel, and leaves other heads' outputs alone.
TEST(CodedAttention, HeadRangesGiveTheWholeCallsResult) {
  std::mt19937 rng(77);
  using Kernel = void (*)(const PagedAttentionArgs&);
  const std::vector<Kernel> kernels = {paged_attention_fast, paged_attention_exact_scalar,
                                       paged_attention_exact};
  for (const Spec& s : {kTq4, kAllSpecs[0]}) {
    const int d = 64, n_kv = 3, group = 3, n_q = n_kv * group;
    const Pages p = build_pages(d, n_kv, 45, 16, s, s, rng);
    const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
    for (Kernel kernel : kernels) {
      std::vector<float> whole(size_t(n_q) * d), split(whole.size(), -7.0f);
      kernel(make_args(p, q.data(), n_q, whole.data()));
      for (int g = n_kv - 1; g >= 0; --g) {
        PagedAttentionArgs a = make_args(p, q.data(), n_q, split.data());
        a.kv_head_begin = g;
        a.kv_head_end = g + 1;
        kernel(a);
        for (size_t i = 0; i < size_t(g) * group * d; ++i) ASSERT_EQ(split[i], -7.0f) << "head range " << g;
      }
      EXPECT_EQ(split, whole) << spec_name(s);
    }
  }
  const Pages small = build_pages(64, 2, 4, 16, kTq4, kTq4, rng);
  PagedAttentionArgs bad = make_args(small, nullptr, 2, nullptr);
  bad.kv_head_begin = 1;
  bad.kv_head_end = 3;
  EXPECT_THROW(paged_attention_fast(bad), std::exception);
}

TEST(CodedAttention, OddHeadDimUsesScalar) {
  std::mt19937 rng(36);
  for (const auto& [ks, vs] : std::vector<std::pair<Spec, Spec>>{{kTq4, kTq2}, {kF16, kBF16}, {kTq2, kF32}}) {
    check_against_reference(ks, vs, 36, 2, 50, 16, rng);
    const Pages p = build_pages(36, 2, 50, 16, ks, vs, rng);
    const std::vector<float> q = random_vec(4 * 36, rng);
    std::vector<float> scalar(4 * 36), dispatch(4 * 36);
    const PagedAttentionArgs a = make_args(p, q.data(), 4, scalar.data());
    EXPECT_FALSE(paged_attention_fast_avx2_available(a));
    EXPECT_THROW(paged_attention_fast_avx2(a), Error);
    EXPECT_FALSE(paged_attention_fast_avx512_available(a));
    EXPECT_THROW(paged_attention_fast_avx512(a), Error);
    paged_attention_exact_scalar(a);
    paged_attention_fast(make_args(p, q.data(), 4, dispatch.data()));
    EXPECT_EQ(dispatch, scalar);
  }
}

TEST(CodedAttention, EmptyContextGivesZeros) {
  for (const Spec& s : {kTq4, kQ8, kF16, kSplit43}) {
    const int d = 64;
    std::vector<float> q(2 * d, 1.0f), out(2 * d, 9.0f);
    PagedAttentionArgs a;
    a.q = q.data();
    a.n_q_heads = 2;
    a.n_kv_heads = 1;
    a.head_dim = d;
    a.k.format = a.v.format = format_for(s, d);
    a.out = out.data();
    a.n_ctx = 0;  // no block table, no pages
    paged_attention_exact_scalar(a);
    for (float o : out) ASSERT_EQ(o, 0.0f) << spec_name(s);
    std::fill(out.begin(), out.end(), 9.0f);
    paged_attention_fast(a);
    for (float o : out) ASSERT_EQ(o, 0.0f) << spec_name(s);
    if (paged_attention_fast_avx2_available(a)) {
      std::fill(out.begin(), out.end(), 9.0f);
      paged_attention_fast_avx2(a);
      for (float o : out) ASSERT_EQ(o, 0.0f) << spec_name(s);
    }
    if (paged_attention_fast_avx512_available(a)) {
      std::fill(out.begin(), out.end(), 9.0f);
      paged_attention_fast_avx512(a);
      for (float o : out) ASSERT_EQ(o, 0.0f) << spec_name(s);
    }
  }
}

// head_dim 8 and 24 (multiples of 8, not of 16): the AVX2 kernel, not the AVX-512 one.
TEST(CodedAttention, HeadDimNotAMultipleOf16UsesAvx2) {
  std::mt19937 rng(816);
  for (int d : {8, 24}) {
    const Pages p = build_pages(d, 2, 40, 16, kF16, kF32, rng);
    const std::vector<float> q = random_vec(4 * size_t(d), rng);
    std::vector<float> simd(4 * size_t(d)), dispatch(simd.size());
    const PagedAttentionArgs a = make_args(p, q.data(), 4, simd.data());
    if (!paged_attention_fast_avx2_available(a)) GTEST_SKIP() << "no AVX2+FMA+F16C on this CPU";
    EXPECT_FALSE(paged_attention_fast_avx512_available(a)) << d;
    EXPECT_THROW(paged_attention_fast_avx512(a), Error) << d;
    paged_attention_fast_avx2(a);
    paged_attention_fast(make_args(p, q.data(), 4, dispatch.data()));
    EXPECT_EQ(dispatch, simd) << d;
  }
}

// One context row: the output is exactly that V row for every query head.
TEST(CodedAttention, SingleRowIsCopied) {
  std::mt19937 rng(1);
  const Pages p = build_pages(128, 2, 1, 16, kTq3, kSplit43, rng);
  const std::vector<float> q = random_vec(6 * 128, rng, 3.0f);
  std::vector<float> out(6 * 128);
  paged_attention_fast(make_args(p, q.data(), 6, out.data()));
  for (int h = 0; h < 6; ++h)
    for (int j = 0; j < 128; ++j) ASSERT_NEAR(out[h * 128 + j], p.v_dec[(h / 3) * 128 + j], 1e-6f) << h << " " << j;
}

TEST(CodedAttention, BadArgumentsFail) {
  const int d = 64;
  std::mt19937 rng(5);
  const Pages p = build_pages(d, 2, 10, 4, kTq4, kQ8, rng);
  std::vector<float> q(6 * d, 0.5f), out(6 * d);
  const PagedAttentionArgs a = make_args(p, q.data(), 6, out.data());
  EXPECT_NO_THROW(paged_attention_fast(a));
  EXPECT_NO_THROW(paged_attention_exact_scalar(a));
  EXPECT_NO_THROW(check_paged_attention_args(a));
  const auto expect_fail = [](const PagedAttentionArgs& bad, const char* what) {
    EXPECT_THROW(check_paged_attention_args(bad), Error) << what;  // what callers check before a parallel loop
    EXPECT_THROW(paged_attention_fast(bad), Error) << what;
    EXPECT_THROW(paged_attention_exact_scalar(bad), Error) << what;
    EXPECT_THROW(paged_attention_fast_avx2(bad), Error) << what;
    EXPECT_THROW(paged_attention_fast_avx512(bad), Error) << what;
  };
  PagedAttentionArgs bad = a;
  bad.n_q_heads = 5;
  expect_fail(bad, "n_q_heads not a multiple of n_kv_heads");
  bad = a;
  bad.n_kv_heads = 0;
  expect_fail(bad, "no KV heads");
  bad = a;
  bad.n_q_heads = 2 * 65;
  expect_fail(bad, "group over 64");
  bad = a;
  bad.k.format.bits = 5;
  expect_fail(bad, "5-bit K");
  bad = a;
  bad.k.format.levels = nullptr;
  expect_fail(bad, "no K codebook");
  bad = a;
  bad.v.format.dim = 128;
  expect_fail(bad, "V format for another head_dim");
  bad = a;
  bad.head_dim = 1024;
  bad.k.format.dim = bad.v.format.dim = 1024;
  expect_fail(bad, "head_dim 1024");
  bad = a;
  bad.head_dim = 48;
  bad.k.format = format_for(kTq4, 48);
  bad.v.format = format_for(kQ8, 48);  // q8_0 needs a multiple of 32
  expect_fail(bad, "q8_0 at 48");
  bad = a;
  bad.block_size = 0;
  expect_fail(bad, "block_size 0");
  bad = a;
  bad.n_ctx = -1;
  expect_fail(bad, "negative n_ctx");
  bad = a;
  bad.out = nullptr;
  expect_fail(bad, "no output");
  bad = a;
  bad.q = nullptr;
  expect_fail(bad, "no query");
  bad = a;
  bad.block_table = nullptr;
  expect_fail(bad, "no block table");
  bad = a;
  bad.v.base = nullptr;
  expect_fail(bad, "no V pages");
}

}  // namespace
}  // namespace tq
