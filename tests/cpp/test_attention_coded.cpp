// Coded paged attention (kernels/attention_coded.h) over rows of every stored format
// (kernels/coded_row.h): in storage space it equals ordinary attention over the rows decoded by
// decode_coded_row_scalar, for every codec, bit width, head size, GQA grouping, context length,
// block size and mix of K/V formats; the AVX2 row decoders are bit-identical to the scalar ones;
// the AVX2 kernel equals the scalar one; bad arguments fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "errors/error.h"
#include "kernels/attention_coded.h"
#include "kernels/attention_fp.h"
#include "kernels/coded_row.h"
#include "kernels/dequantize.h"
#include "kernels/tq_packing.h"
#include "quant/baseline_quant.h"
#include "quant/codebook.h"
#include "quant/rotation.h"
#include "quant/tq_row.h"

namespace tq {
namespace {

// What one side stores: a codec and, for TurboQuant, its bit widths.
struct Spec {
  RowCodec codec = RowCodec::F32;
  int bits = 0, bits_lo = 0;
};

std::string spec_name(const Spec& s) {
  switch (s.codec) {
    case RowCodec::F32: return "f32";
    case RowCodec::BF16: return "bf16";
    case RowCodec::F16: return "f16";
    case RowCodec::Q8_0: return "q8_0";
    case RowCodec::Q4_0: return "q4_0";
    case RowCodec::TQ: return "tq" + std::to_string(s.bits);
    case RowCodec::TQ_SPLIT: return "tq" + std::to_string(s.bits) + std::to_string(s.bits_lo);
  }
  return "?";
}

const Spec kF32{RowCodec::F32}, kBF16{RowCodec::BF16}, kF16{RowCodec::F16}, kQ8{RowCodec::Q8_0},
    kQ4{RowCodec::Q4_0}, kTq1{RowCodec::TQ, 1}, kTq2{RowCodec::TQ, 2}, kTq3{RowCodec::TQ, 3},
    kTq4{RowCodec::TQ, 4}, kSplit43{RowCodec::TQ_SPLIT, 4, 3}, kSplit32{RowCodec::TQ_SPLIT, 3, 2};
const std::vector<Spec> kAllSpecs = {kF32, kBF16, kF16, kQ8, kQ4, kTq1, kTq2, kTq3, kTq4, kSplit43, kSplit32};

// Whether head_dim d can be stored as s (mirrors the format's documented requirements).
bool spec_fits(const Spec& s, int d) {
  const auto tq_fits = [](int dim, int bits) { return dim % (bits == 4 ? 2 : bits == 2 ? 4 : 8) == 0; };
  switch (s.codec) {
    case RowCodec::Q8_0:
    case RowCodec::Q4_0: return d % 32 == 0;
    case RowCodec::TQ: return tq_fits(d, s.bits);
    case RowCodec::TQ_SPLIT: return d % 2 == 0 && tq_fits(d / 2, s.bits) && tq_fits(d / 2, s.bits_lo);
    default: return true;
  }
}

const Codebook& codebook_for(int d, int bits) {
  static std::map<std::pair<int, int>, Codebook> cache;
  auto it = cache.find({d, bits});
  if (it == cache.end()) it = cache.emplace(std::make_pair(d, bits), make_codebook(CodebookKind::beta, d, bits)).first;
  return it->second;
}

// Dense for any size, Hadamard for powers of two (both kinds get used). `layer` varies the seed.
const Rotation& rotation_for(int d, int layer) {
  static std::map<std::pair<int, int>, Rotation> cache;
  auto it = cache.find({d, layer});
  if (it == cache.end()) {
    const bool pow2 = (d & (d - 1)) == 0;
    const RotationKind kind = pow2 && layer % 2 == 0 ? RotationKind::hadamard : RotationKind::dense;
    it = cache.emplace(std::make_pair(d, layer), Rotation::make(kind, d, 42, layer)).first;
  }
  return it->second;
}

CodedRowFormat format_for(const Spec& s, int d) {
  CodedRowFormat f;
  f.codec = s.codec;
  f.dim = d;
  if (s.codec == RowCodec::TQ) {
    f.bits = s.bits;
    f.levels = codebook_for(d, s.bits).centroids.data();
  } else if (s.codec == RowCodec::TQ_SPLIT) {
    f.bits = s.bits;
    f.bits_lo = s.bits_lo;
    f.levels = codebook_for(d / 2, s.bits).centroids.data();
    f.levels_lo = codebook_for(d / 2, s.bits_lo).centroids.data();
  }
  return f;
}

// Stores x (d floats) as s into `row` with the library's encoders.
void encode_row(const Spec& s, int d, const float* x, uint8_t* row) {
  switch (s.codec) {
    case RowCodec::F32: std::memcpy(row, x, sizeof(float) * d); return;
    case RowCodec::BF16:
      for (int j = 0; j < d; ++j) {
        const uint16_t h = fp32_to_bf16(x[j]);
        std::memcpy(row + 2 * j, &h, 2);
      }
      return;
    case RowCodec::F16:
      for (int j = 0; j < d; ++j) {
        const uint16_t h = fp32_to_fp16(x[j]);
        std::memcpy(row + 2 * j, &h, 2);
      }
      return;
    case RowCodec::Q8_0: quantize_row_q8_0(x, d, row); return;
    case RowCodec::Q4_0: quantize_row_q4_0(x, d, row); return;
    case RowCodec::TQ: tq_encode_row(x, codebook_for(d, s.bits), rotation_for(d, 0), row); return;
    case RowCodec::TQ_SPLIT:  // the halves get different rotations: the format allows it
      tq_encode_split_row(x, codebook_for(d / 2, s.bits), rotation_for(d / 2, 2), codebook_for(d / 2, s.bits_lo),
                          rotation_for(d / 2, 3), row);
      return;
  }
}

std::vector<float> random_vec(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& e : v) e = normal(rng);
  return v;
}

// One layer's K/V pages for one sequence, plus the scalar-decoded rows.
struct Pages {
  int d = 0, n_kv = 0, n_ctx = 0, block_size = 0;
  std::vector<uint8_t> k_pages, v_pages;
  std::vector<int32_t> block_table;
  CodedPagedRows k, v;
  std::vector<float> k_dec, v_dec;  // [n_ctx, n_kv, d]
};

// K pages are laid out [block][kv head][offset] with padded rows, V pages [block][offset][kv head]
// (so all three strides are exercised). Blocks are handed out in a scrambled order; unused bytes
// hold a fill pattern so that reading a wrong row shows.
Pages build_pages(int d, int n_kv, int n_ctx, int block_size, const Spec& ks, const Spec& vs, std::mt19937& rng) {
  Pages p;
  p.d = d, p.n_kv = n_kv, p.n_ctx = n_ctx, p.block_size = block_size;
  const CodedRowFormat kf = format_for(ks, d), vf = format_for(vs, d);
  const size_t k_row = coded_row_bytes(kf) + 12, v_row = coded_row_bytes(vf);
  const int needed = (n_ctx + block_size - 1) / block_size;
  const int n_blocks = 2 * needed + 3;
  p.k = {nullptr, size_t(n_kv) * block_size * k_row, size_t(block_size) * k_row, k_row, kf};
  p.v = {nullptr, size_t(n_kv) * block_size * v_row, v_row, size_t(n_kv) * v_row, vf};
  p.k_pages.assign(n_blocks * p.k.block_stride, 0x7B);
  p.v_pages.assign(n_blocks * p.v.block_stride, 0x7B);
  p.k.base = p.k_pages.data();
  p.v.base = p.v_pages.data();
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.block_table.assign(perm.begin(), perm.begin() + needed);

  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  p.k_dec.resize(size_t(n_ctx) * n_kv * d);
  p.v_dec.resize(p.k_dec.size());
  for (int t = 0; t < n_ctx; ++t) {
    const int32_t b = p.block_table[t / block_size];
    const int o = t % block_size;
    for (int g = 0; g < n_kv; ++g) {
      uint8_t* kr = p.k_pages.data() + b * p.k.block_stride + g * p.k.head_stride + o * p.k.row_stride;
      uint8_t* vr = p.v_pages.data() + b * p.v.block_stride + g * p.v.head_stride + o * p.v.row_stride;
      const std::vector<float> kx = random_vec(d, rng, mag(rng)), vx = random_vec(d, rng, mag(rng));
      encode_row(ks, d, kx.data(), kr);
      decode_coded_row_scalar(kf, kr, p.k_dec.data() + (size_t(t) * n_kv + g) * d);
      encode_row(vs, d, vx.data(), vr);
      decode_coded_row_scalar(vf, vr, p.v_dec.data() + (size_t(t) * n_kv + g) * d);
    }
  }
  return p;
}

CodedAttentionArgs make_args(const Pages& p, const float* q, int n_q, float* out) {
  CodedAttentionArgs a;
  a.q = q;
  a.n_q_heads = n_q;
  a.n_kv_heads = p.n_kv;
  a.head_dim = p.d;
  a.block_table = p.block_table.data();
  a.block_size = p.block_size;
  a.n_ctx = p.n_ctx;
  a.k = p.k;
  a.v = p.v;
  a.scale = 1.0f / std::sqrt(float(p.d));
  a.out = out;
  return a;
}

// Max |a - b| relative to max |b| over the whole output.
float relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float diff = 0, mag = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    mag = std::max(mag, std::fabs(b[i]));
  }
  return mag > 0 ? diff / mag : diff;
}

// Scalar kernel against attention_reference (double) over the scalar-decoded rows.
void check_against_reference(const Spec& ks, const Spec& vs, int d, int group, int n_ctx, int block_size,
                             std::mt19937& rng) {
  SCOPED_TRACE("k=" + spec_name(ks) + " v=" + spec_name(vs) + " d=" + std::to_string(d) + " group=" +
               std::to_string(group) + " n_ctx=" + std::to_string(n_ctx) + " block_size=" + std::to_string(block_size));
  const int n_kv = 2, n_q = n_kv * group;
  const Pages p = build_pages(d, n_kv, n_ctx, block_size, ks, vs, rng);
  const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 1.5f);
  std::vector<float> out(size_t(n_q) * d, -7.0f), ref(out.size());
  paged_attention_coded_scalar(make_args(p, q.data(), n_q, out.data()));
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

// An fp16-scale TurboQuant row (tq<b>h): the codes of the fp32 row, its scale rounded to fp16;
// every decoder gives levels[idx] * that scale, bit for bit alike.
TEST(CodedRow, Fp16ScaleRows) {
  std::mt19937 rng(13);
  for (int d : {64, 128, 48}) {
    for (int bits = 2; bits <= 4; ++bits) {
      if (!spec_fits(Spec{RowCodec::TQ, bits}, d)) continue;
      SCOPED_TRACE("d=" + std::to_string(d) + " bits=" + std::to_string(bits));
      CodedRowFormat f = format_for(Spec{RowCodec::TQ, bits}, d);
      f.f16_scale = true;
      EXPECT_EQ(coded_row_bytes(f), tq_codes_bytes(d, bits) + 2);
      std::vector<uint8_t> full(tq_row_bytes(d, bits)), row(coded_row_bytes(f) * 3);
      const std::vector<float> x = random_vec(d, rng, 2.5f);
      tq_encode_row(x.data(), codebook_for(d, bits), rotation_for(d, 0), full.data());
      const uint16_t h = tq_scale_to_fp16(tq_row_scale(full.data(), d, bits));
      for (int r = 0; r < 3; ++r) {
        std::memcpy(row.data() + r * coded_row_bytes(f), full.data(), tq_codes_bytes(d, bits));
        std::memcpy(row.data() + r * coded_row_bytes(f) + tq_codes_bytes(d, bits), &h, 2);
      }
      std::vector<uint8_t> idx(d);
      unpack_indices(full.data(), d, bits, idx.data());
      std::vector<float> want(d), got(d), rows(3 * d);
      for (int j = 0; j < d; ++j) want[j] = codebook_for(d, bits).centroids[idx[j]] * fp16_to_fp32(h);
      decode_coded_row_scalar(f, row.data(), got.data());
      EXPECT_EQ(got, want);
      if (!coded_row_avx2_available(f)) continue;
      decode_coded_row_avx2(f, row.data(), got.data());
      EXPECT_EQ(got, want);
      decode_coded_rows_avx2(f, row.data(), coded_row_bytes(f), 3, rows.data(), d);
      for (int r = 0; r < 3; ++r) EXPECT_EQ(std::vector<float>(rows.begin() + r * d, rows.begin() + (r + 1) * d), want);
    }
  }
}

// AVX2 row decoders are bit-identical to the scalar ones, on encoded rows and on random codes,
// for sizes that take the SIMD paths (64, 128) and ones that fall back per part (48, 96, 40).
TEST(CodedRow, Avx2DecodeIsBitIdenticalToScalar) {
  if (!coded_row_avx2_available(format_for(kF32, 64))) GTEST_SKIP() << "no AVX2+FMA+F16C on this CPU";
  std::mt19937 rng(12);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-3.0f, 3.0f);
  int checked = 0;
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
      }
    }
  }
  EXPECT_GT(checked, 300);
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
// Attention: AVX2 kernel and dispatch against the scalar kernel

TEST(CodedAttention, Avx2MatchesScalar) {
  std::mt19937 rng(4242);
  {
    Pages p = build_pages(64, 1, 3, 16, kTq4, kTq4, rng);
    std::vector<float> q(64), out(64);
    if (!paged_attention_coded_avx2_available(make_args(p, q.data(), 1, out.data())))
      GTEST_SKIP() << "no AVX2+FMA+F16C on this CPU";
  }
  int cases = 0;
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
          const CodedAttentionArgs a = make_args(p, q.data(), n_q, scalar.data());
          ASSERT_TRUE(paged_attention_coded_avx2_available(a));
          paged_attention_coded_scalar(a);
          paged_attention_coded_avx2(make_args(p, q.data(), n_q, simd.data()));
          paged_attention_coded(make_args(p, q.data(), n_q, dispatch.data()));
          EXPECT_LE(relative_diff(simd, scalar), 1e-5f);
          EXPECT_EQ(dispatch, simd);
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 300);
}

// The FP cache's kernel (the plain loop with SIMD decoding and lane-parallel but unreordered
// dot products) gives the plain scalar kernel's result bit for bit, for every codec, head size
// (multiples of 8 take the SIMD path, 36 the plain one) and context length (8-position groups
// and their tails).
TEST(CodedAttention, FastDecodeKernelIsBitIdenticalToScalar) {
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
        std::vector<float> plain(size_t(n_q) * d), fast(plain.size(), -1.0f);
        paged_attention_coded_scalar(make_args(p, q.data(), n_q, plain.data()));
        paged_attention_coded_scalar_fast_decode(make_args(p, q.data(), n_q, fast.data()));
        ASSERT_EQ(0, std::memcmp(plain.data(), fast.data(), plain.size() * sizeof(float)));
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 100);
}

// A prefill chunk's own rows passed unquantized (exact_from): positions before it come from the
// pages, positions from it on from the exact arrays, in every kernel (fast-decode bit-identical
// to scalar), for chunks that start mid-block, at 0 and at the last position.
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
        std::vector<float> ref(size_t(n_q) * d), scalar(ref.size()), fast(ref.size()), best(ref.size());
        attention_reference(q.data(), k_all.data(), v_all.data(), n_q, n_kv, d, n_ctx, 1.0f / std::sqrt(float(d)),
                            ref.data());
        const auto args = [&](float* out) {
          CodedAttentionArgs a = make_args(p, q.data(), n_q, out);
          a.exact_from = exact_from;
          a.exact_k = exact_k.data();
          a.exact_v = exact_v.data();
          return a;
        };
        paged_attention_coded_scalar(args(scalar.data()));
        paged_attention_coded_scalar_fast_decode(args(fast.data()));
        paged_attention_coded(args(best.data()));
        EXPECT_LE(relative_diff(scalar, ref), 1e-5f);
        EXPECT_EQ(0, std::memcmp(scalar.data(), fast.data(), scalar.size() * sizeof(float)));
        EXPECT_LE(relative_diff(best, ref), 1e-5f);
      }
    }
  }
  std::vector<float> q(64), out(64), rows(64);
  Pages p = build_pages(64, 1, 4, 16, kTq4, kTq4, rng);
  CodedAttentionArgs a = make_args(p, q.data(), 1, out.data());
  a.exact_from = 2;  // rows missing
  EXPECT_THROW(paged_attention_coded_scalar(a), Error);
  a.exact_k = a.exact_v = rows.data();
  a.exact_from = 5;  // past n_ctx
  EXPECT_THROW(paged_attention_coded_scalar(a), Error);
}

// Full-precision windows: positions outside [coded_begin, coded_end) come from the window pages
// (their own blocks, through a data block -> window block map), tile edges and block edges falling anywhere, with parts and exact
// chunk rows on top; every kernel against the reference over the rows each position should read.
TEST(CodedAttention, WindowRowsReplaceThePagesOutsideTheCodedRange) {
  std::mt19937 rng(808);
  const int d = 64, n_kv = 2, n_q = 6, n_ctx = 70;
  for (const auto& [ks, vs] : std::vector<std::pair<Spec, Spec>>{{kTq4, kTq4}, {kTq2, kQ4}, {kF16, kTq3}}) {
    for (const auto& [cb, ce] : std::vector<std::pair<int, int>>{{4, 38}, {0, 70}, {5, 5}, {13, 69}, {30, 20}}) {
      for (int exact_from : {-1, 61}) {
        SCOPED_TRACE("k=" + spec_name(ks) + " v=" + spec_name(vs) + " coded [" + std::to_string(cb) + ", " +
                     std::to_string(ce) + ") exact_from=" + std::to_string(exact_from));
        const Pages p = build_pages(d, n_kv, n_ctx, 16, ks, vs, rng);
        const Pages w = build_pages(d, n_kv, n_ctx, 16, kF16, kF32, rng);
        std::vector<int32_t> window_of(p.k_pages.size() / p.k.block_stride, -1);  // data block -> window block
        for (size_t i = 0; i < p.block_table.size(); ++i) window_of[p.block_table[i]] = w.block_table[i];
        const size_t tail = exact_from < 0 ? 0 : size_t(n_ctx - exact_from) * n_kv * d;
        const std::vector<float> exact_k = random_vec(tail, rng), exact_v = random_vec(tail, rng);
        std::vector<float> k_all(p.k_dec.size()), v_all(p.v_dec.size());
        for (int t = 0; t < n_ctx; ++t) {
          const bool coded = t >= cb && t < ce;
          const size_t at = size_t(t) * n_kv * d, n = size_t(n_kv) * d;
          std::copy_n((coded ? p.k_dec : w.k_dec).begin() + at, n, k_all.begin() + at);
          std::copy_n((coded ? p.v_dec : w.v_dec).begin() + at, n, v_all.begin() + at);
        }
        if (exact_from >= 0) {
          std::copy(exact_k.begin(), exact_k.end(), k_all.begin() + size_t(exact_from) * n_kv * d);
          std::copy(exact_v.begin(), exact_v.end(), v_all.begin() + size_t(exact_from) * n_kv * d);
        }
        const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 1.5f);
        std::vector<float> ref(size_t(n_q) * d), scalar(ref.size()), fast(ref.size()), best(ref.size());
        attention_reference(q.data(), k_all.data(), v_all.data(), n_q, n_kv, d, n_ctx, 1.0f / std::sqrt(float(d)),
                            ref.data());
        const auto args = [&](float* out) {
          CodedAttentionArgs a = make_args(p, q.data(), n_q, out);
          a.windows = true;
          a.window_k = w.k;
          a.window_v = w.v;
          a.window_k.block_map = a.window_v.block_map = window_of.data();
          a.coded_begin = cb;
          a.coded_end = ce;
          if (exact_from >= 0) {
            a.exact_from = exact_from;
            a.exact_k = exact_k.data();
            a.exact_v = exact_v.data();
          }
          return a;
        };
        paged_attention_coded_scalar(args(scalar.data()));
        paged_attention_coded_scalar_fast_decode(args(fast.data()));
        paged_attention_coded(args(best.data()));
        EXPECT_LE(relative_diff(scalar, ref), 1e-5f);
        EXPECT_EQ(0, std::memcmp(scalar.data(), fast.data(), scalar.size() * sizeof(float)));
        EXPECT_LE(relative_diff(best, ref), 1e-5f);
        // In two parts split inside the coded range, combined: the same result.
        std::vector<float> parts(2 * ref.size()), stats_max(2 * n_q), stats_sum(2 * n_q), combined(ref.size());
        for (int part = 0; part < 2; ++part) {
          CodedAttentionArgs a = args(parts.data() + part * ref.size());
          a.ctx_begin = part == 0 ? 0 : 27;
          a.n_ctx = part == 0 ? 27 : n_ctx;
          if (a.exact_from > a.n_ctx) a.exact_from = a.n_ctx;  // as the layer does: none in this part
          a.partial_max = stats_max.data() + part * n_q;
          a.partial_sum = stats_sum.data() + part * n_q;
          paged_attention_coded(a);
        }
        combine_attention_parts(2, parts.data(), ref.size(), stats_max.data(), stats_sum.data(), n_q, n_q, d,
                                combined.data());
        EXPECT_LE(relative_diff(combined, ref), 1e-5f);
      }
    }
  }
  std::vector<float> q(64), out(64);
  Pages p = build_pages(64, 1, 4, 16, kTq4, kTq4, rng);
  CodedAttentionArgs a = make_args(p, q.data(), 1, out.data());
  a.windows = true;  // window pages missing
  EXPECT_THROW(paged_attention_coded_scalar(a), Error);
}

// head_dim 36 is no multiple of 8: no AVX2 kernel, and dispatch runs the scalar one.
// The context attended in parts (split at various points, an empty part included) and the
// parts combined gives the whole call's result, in the scalar and AVX2 kernels, with a prefill
// chunk's exact rows spanning a split; the FP path's kernel refuses parts.
TEST(CodedAttention, PartsCombineToTheWholeContext) {
  std::mt19937 rng(31);
  using Kernel = void (*)(const CodedAttentionArgs&);
  for (Kernel kernel : std::vector<Kernel>{paged_attention_coded_scalar, paged_attention_coded}) {
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
            CodedAttentionArgs a = make_args(p, q.data(), n_q, out);
            if (exact) a.exact_from = 250, a.exact_k = exact_k.data(), a.exact_v = exact_v.data();
            return a;
          };
          std::vector<float> whole(size_t(n_q) * d), combined(whole.size(), -1.0f);
          kernel(args(whole.data()));
          const int parts = static_cast<int>(cuts.size()) - 1;
          std::vector<float> part_out(size_t(parts) * n_q * d, -3.0f), part_max(size_t(parts) * n_q), part_sum(part_max.size());
          for (int i = 0; i < parts; ++i) {
            CodedAttentionArgs a = args(part_out.data() + size_t(i) * n_q * d);
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
      CodedAttentionArgs a = make_args(p, q.data(), n_q, std::vector<float>(size_t(n_q) * d).data());
      a.ctx_begin = n_ctx + 1;
      EXPECT_THROW(kernel(a), Error);
    }
  }
  const Pages p = build_pages(64, 1, 40, 16, kF16, kF16, rng);
  std::vector<float> q(64), out(64), m(1), sum(1);
  CodedAttentionArgs a = make_args(p, q.data(), 1, out.data());
  a.ctx_begin = 16;
  EXPECT_THROW(paged_attention_coded_scalar_fast_decode(a), Error);
  a.ctx_begin = 0;
  a.partial_max = m.data();
  EXPECT_THROW(paged_attention_coded_scalar(a), Error);  // partial_sum missing
  a.partial_sum = sum.data();
  EXPECT_THROW(paged_attention_coded_scalar_fast_decode(a), Error);
}

// Computing KV heads one range at a time (as the model does across threads) gives the result
// of one call over all heads bit for bit, in every kernel, and leaves other heads' outputs alone.
TEST(CodedAttention, HeadRangesGiveTheWholeCallsResult) {
  std::mt19937 rng(77);
  using Kernel = void (*)(const CodedAttentionArgs&);
  const std::vector<Kernel> kernels = {paged_attention_coded, paged_attention_coded_scalar,
                                       paged_attention_coded_scalar_fast_decode};
  for (const Spec& s : {kTq4, kAllSpecs[0]}) {
    const int d = 64, n_kv = 3, group = 3, n_q = n_kv * group;
    const Pages p = build_pages(d, n_kv, 45, 16, s, s, rng);
    const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 2.0f);
    for (Kernel kernel : kernels) {
      std::vector<float> whole(size_t(n_q) * d), split(whole.size(), -7.0f);
      kernel(make_args(p, q.data(), n_q, whole.data()));
      for (int g = n_kv - 1; g >= 0; --g) {
        CodedAttentionArgs a = make_args(p, q.data(), n_q, split.data());
        a.kv_head_begin = g;
        a.kv_head_end = g + 1;
        kernel(a);
        for (size_t i = 0; i < size_t(g) * group * d; ++i) ASSERT_EQ(split[i], -7.0f) << "head range " << g;
      }
      EXPECT_EQ(split, whole) << spec_name(s);
    }
  }
  const Pages small = build_pages(64, 2, 4, 16, kTq4, kTq4, rng);
  CodedAttentionArgs bad = make_args(small, nullptr, 2, nullptr);
  bad.kv_head_begin = 1;
  bad.kv_head_end = 3;
  EXPECT_THROW(paged_attention_coded(bad), std::exception);
}

TEST(CodedAttention, OddHeadDimUsesScalar) {
  std::mt19937 rng(36);
  for (const auto& [ks, vs] : std::vector<std::pair<Spec, Spec>>{{kTq4, kTq2}, {kF16, kBF16}, {kTq2, kF32}}) {
    check_against_reference(ks, vs, 36, 2, 50, 16, rng);
    const Pages p = build_pages(36, 2, 50, 16, ks, vs, rng);
    const std::vector<float> q = random_vec(4 * 36, rng);
    std::vector<float> scalar(4 * 36), dispatch(4 * 36);
    const CodedAttentionArgs a = make_args(p, q.data(), 4, scalar.data());
    EXPECT_FALSE(paged_attention_coded_avx2_available(a));
    EXPECT_THROW(paged_attention_coded_avx2(a), Error);
    paged_attention_coded_scalar(a);
    paged_attention_coded(make_args(p, q.data(), 4, dispatch.data()));
    EXPECT_EQ(dispatch, scalar);
  }
}

TEST(CodedAttention, EmptyContextGivesZeros) {
  for (const Spec& s : {kTq4, kQ8, kF16, kSplit43}) {
    const int d = 64;
    std::vector<float> q(2 * d, 1.0f), out(2 * d, 9.0f);
    CodedAttentionArgs a;
    a.q = q.data();
    a.n_q_heads = 2;
    a.n_kv_heads = 1;
    a.head_dim = d;
    a.k.format = a.v.format = format_for(s, d);
    a.out = out.data();
    a.n_ctx = 0;  // no block table, no pages
    paged_attention_coded_scalar(a);
    for (float o : out) ASSERT_EQ(o, 0.0f) << spec_name(s);
    std::fill(out.begin(), out.end(), 9.0f);
    paged_attention_coded(a);
    for (float o : out) ASSERT_EQ(o, 0.0f) << spec_name(s);
    if (paged_attention_coded_avx2_available(a)) {
      std::fill(out.begin(), out.end(), 9.0f);
      paged_attention_coded_avx2(a);
      for (float o : out) ASSERT_EQ(o, 0.0f) << spec_name(s);
    }
  }
}

// One context row: the output is exactly that V row for every query head.
TEST(CodedAttention, SingleRowIsCopied) {
  std::mt19937 rng(1);
  const Pages p = build_pages(128, 2, 1, 16, kTq3, kSplit43, rng);
  const std::vector<float> q = random_vec(6 * 128, rng, 3.0f);
  std::vector<float> out(6 * 128);
  paged_attention_coded(make_args(p, q.data(), 6, out.data()));
  for (int h = 0; h < 6; ++h)
    for (int j = 0; j < 128; ++j) ASSERT_NEAR(out[h * 128 + j], p.v_dec[(h / 3) * 128 + j], 1e-6f) << h << " " << j;
}

TEST(CodedAttention, BadArgumentsFail) {
  const int d = 64;
  std::mt19937 rng(5);
  const Pages p = build_pages(d, 2, 10, 4, kTq4, kQ8, rng);
  std::vector<float> q(6 * d, 0.5f), out(6 * d);
  const CodedAttentionArgs a = make_args(p, q.data(), 6, out.data());
  EXPECT_NO_THROW(paged_attention_coded(a));
  EXPECT_NO_THROW(paged_attention_coded_scalar(a));
  const auto expect_fail = [](const CodedAttentionArgs& bad, const char* what) {
    EXPECT_THROW(paged_attention_coded(bad), Error) << what;
    EXPECT_THROW(paged_attention_coded_scalar(bad), Error) << what;
    EXPECT_THROW(paged_attention_coded_avx2(bad), Error) << what;
  };
  CodedAttentionArgs bad = a;
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
