// TurboQuant paged attention (kernels/attention_tq.h): in rotated space over packed rows it equals
// ordinary attention over the decoded rows (after R^T on the output), for every bit width, head
// size, GQA grouping, context length, block size and rotation kind; the AVX2 kernel equals the
// scalar one; bad arguments fail.
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
#include "kernels/attention_fp.h"
#include "kernels/attention_tq.h"
#include "quant/codebook.h"
#include "quant/rotation.h"
#include "quant/tq_row.h"

namespace tq {
namespace {

const Codebook& codebook_for(int d, int bits) {
  static std::map<std::pair<int, int>, Codebook> cache;
  auto it = cache.find({d, bits});
  if (it == cache.end()) {
    it = cache.emplace(std::make_pair(d, bits), make_codebook(CodebookKind::gaussian, d, bits)).first;
  }
  return it->second;
}

const Rotation& rotation_for(RotationKind kind, int d) {
  static std::map<std::pair<int, int>, Rotation> cache;
  auto it = cache.find({int(kind), d});
  if (it == cache.end()) {
    it = cache.emplace(std::make_pair(int(kind), d), Rotation::make(kind, d, 42, 3)).first;
  }
  return it->second;
}

// One layer's TurboQuant K/V pages for one sequence, plus the decoded rows.
struct TqPages {
  int d = 0, n_kv = 0, n_ctx = 0, block_size = 0, k_bits = 0, v_bits = 0;
  std::vector<uint8_t> k_pages, v_pages;
  std::vector<int32_t> block_table;
  TqPagedRows k, v;
  std::vector<float> k_dec, v_dec;  // [n_ctx, n_kv, d]: tq_decode_row of each stored row
};

// K pages are laid out [block][kv head][offset] with padded rows; V pages [block][offset][kv head]
// (so all three strides are exercised). Blocks are handed out in a scrambled order.
TqPages build_pages(int d, int n_kv, int n_ctx, int block_size, int k_bits, int v_bits,
                    const Rotation& rot, std::mt19937& rng) {
  TqPages p;
  p.d = d, p.n_kv = n_kv, p.n_ctx = n_ctx, p.block_size = block_size;
  p.k_bits = k_bits, p.v_bits = v_bits;
  const Codebook& kcb = codebook_for(d, k_bits);
  const Codebook& vcb = codebook_for(d, v_bits);
  const size_t k_row = tq_row_bytes(d, k_bits) + 12, v_row = tq_row_bytes(d, v_bits);
  const int needed = (n_ctx + block_size - 1) / block_size;
  const int n_blocks = 2 * needed + 3;
  p.k = {nullptr, size_t(n_kv) * block_size * k_row, size_t(block_size) * k_row, k_row};
  p.v = {nullptr, size_t(n_kv) * block_size * v_row, v_row, size_t(n_kv) * v_row};
  p.k_pages.assign(n_blocks * p.k.block_stride, 0xA5);
  p.v_pages.assign(n_blocks * p.v.block_stride, 0x5A);
  p.k.base = p.k_pages.data();
  p.v.base = p.v_pages.data();
  std::vector<int32_t> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  p.block_table.assign(perm.begin(), perm.begin() + needed);

  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> mag(0.5f, 2.0f);
  std::vector<float> x(d);
  p.k_dec.resize(size_t(n_ctx) * n_kv * d);
  p.v_dec.resize(p.k_dec.size());
  for (int t = 0; t < n_ctx; ++t) {
    const int32_t b = p.block_table[t / block_size];
    const int o = t % block_size;
    for (int g = 0; g < n_kv; ++g) {
      uint8_t* kr = p.k_pages.data() + b * p.k.block_stride + g * p.k.head_stride + o * p.k.row_stride;
      uint8_t* vr = p.v_pages.data() + b * p.v.block_stride + g * p.v.head_stride + o * p.v.row_stride;
      const float km = mag(rng), vm = mag(rng);
      for (float& e : x) e = km * normal(rng);
      tq_encode_row(x.data(), kcb, rot, kr);
      tq_decode_row(kr, kcb, rot, p.k_dec.data() + (size_t(t) * n_kv + g) * d);
      for (float& e : x) e = vm * normal(rng);
      tq_encode_row(x.data(), vcb, rot, vr);
      tq_decode_row(vr, vcb, rot, p.v_dec.data() + (size_t(t) * n_kv + g) * d);
    }
  }
  return p;
}

TqAttentionArgs make_args(const TqPages& p, const float* q_rot, int n_q, float* out_rot) {
  TqAttentionArgs a;
  a.q_rot = q_rot;
  a.n_q_heads = n_q;
  a.n_kv_heads = p.n_kv;
  a.head_dim = p.d;
  a.block_table = p.block_table.data();
  a.block_size = p.block_size;
  a.n_ctx = p.n_ctx;
  a.k = p.k;
  a.v = p.v;
  a.k_bits = p.k_bits;
  a.v_bits = p.v_bits;
  a.k_codebook = codebook_for(p.d, p.k_bits).centroids.data();
  a.v_codebook = codebook_for(p.d, p.v_bits).centroids.data();
  a.scale = 1.0f / std::sqrt(float(p.d));
  a.out_rot = out_rot;
  return a;
}

std::vector<float> random_vec(size_t n, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& e : v) e = normal(rng);
  return v;
}

// q' = R q per head.
std::vector<float> rotate_heads(const Rotation& rot, const std::vector<float>& q, int n_q, int d) {
  std::vector<float> out(q.size());
  for (int h = 0; h < n_q; ++h) rot.apply(q.data() + size_t(h) * d, out.data() + size_t(h) * d);
  return out;
}

using Param = std::tuple<int, int, int, RotationKind>;  // head_dim, group, bits, rotation

class TqAttentionTest : public ::testing::TestWithParam<Param> {};

TEST_P(TqAttentionTest, ScalarMatchesReferenceOverDecodedRows) {
  const auto [d, group, bits, kind] = GetParam();
  const Rotation& rot = rotation_for(kind, d);
  const int n_kv = 2, n_q = n_kv * group;
  std::mt19937 rng(1000 + d * 31 + group * 7 + bits);
  for (int n_ctx : {1, 37, 300}) {
    for (int block_size : {1, 16, 128}) {
      SCOPED_TRACE("n_ctx=" + std::to_string(n_ctx) + " block_size=" + std::to_string(block_size));
      const TqPages p = build_pages(d, n_kv, n_ctx, block_size, bits, bits, rot, rng);
      const std::vector<float> q = random_vec(size_t(n_q) * d, rng, 1.5f);
      const std::vector<float> q_rot = rotate_heads(rot, q, n_q, d);
      std::vector<float> out_rot(size_t(n_q) * d, -7.0f);
      paged_attention_tq_scalar(make_args(p, q_rot.data(), n_q, out_rot.data()));
      std::vector<float> out(out_rot.size());
      for (int h = 0; h < n_q; ++h) {
        rot.apply_transpose(out_rot.data() + size_t(h) * d, out.data() + size_t(h) * d);
      }
      std::vector<float> ref(out.size());
      attention_reference(q.data(), p.k_dec.data(), p.v_dec.data(), n_q, n_kv, d, n_ctx,
                          1.0f / std::sqrt(float(d)), ref.data());
      float max_err = 0;
      for (size_t i = 0; i < out.size(); ++i) max_err = std::max(max_err, std::fabs(out[i] - ref[i]));
      EXPECT_LE(max_err, 1e-4f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    All, TqAttentionTest,
    ::testing::Combine(::testing::Values(64, 128), ::testing::Values(1, 3, 7),
                       ::testing::Values(2, 3, 4),
                       ::testing::Values(RotationKind::dense, RotationKind::hadamard)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return "d" + std::to_string(std::get<0>(info.param)) + "_g" +
             std::to_string(std::get<1>(info.param)) + "_b" +
             std::to_string(std::get<2>(info.param)) + "_" +
             std::string(rotation_kind_name(std::get<3>(info.param)));
    });

// Mixed key/value widths (keys are the sensitive half) and 1-bit rows, scalar against reference.
TEST(TqAttention, MixedAndOneBitWidths) {
  const int d = 128, n_kv = 2, n_q = 8;
  const Rotation& rot = rotation_for(RotationKind::hadamard, d);
  std::mt19937 rng(77);
  for (auto [kb, vb] : std::vector<std::pair<int, int>>{{4, 2}, {3, 4}, {2, 3}, {1, 1}, {4, 1}}) {
    SCOPED_TRACE("k_bits=" + std::to_string(kb) + " v_bits=" + std::to_string(vb));
    const TqPages p = build_pages(d, n_kv, 100, 16, kb, vb, rot, rng);
    const std::vector<float> q = random_vec(size_t(n_q) * d, rng);
    const std::vector<float> q_rot = rotate_heads(rot, q, n_q, d);
    std::vector<float> out_rot(size_t(n_q) * d), out(out_rot.size()), ref(out.size());
    paged_attention_tq_scalar(make_args(p, q_rot.data(), n_q, out_rot.data()));
    for (int h = 0; h < n_q; ++h) rot.apply_transpose(out_rot.data() + h * d, out.data() + h * d);
    attention_reference(q.data(), p.k_dec.data(), p.v_dec.data(), n_q, n_kv, d, 100,
                        1.0f / std::sqrt(float(d)), ref.data());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-4f) << i;
  }
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

TEST(TqAttention, Avx2MatchesScalar) {
  if (!paged_attention_tq_avx2_available(64)) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  std::mt19937 rng(4242);
  int cases = 0;
  for (int d : {64, 128, 256, 40}) {  // 40: SIMD dot / accumulate with scalar row decode
    for (int bits = 1; bits <= 4; ++bits) {
      if (d == 40 && bits != 4 && bits != 2) continue;  // 40 is not a multiple of 8 / 3 bits
      for (int group : {1, 3, 7}) {
        for (int n_ctx : {1, 37, 300}) {
          SCOPED_TRACE("d=" + std::to_string(d) + " bits=" + std::to_string(bits) + " group=" +
                       std::to_string(group) + " n_ctx=" + std::to_string(n_ctx));
          const Rotation& rot = rotation_for(d == 40 ? RotationKind::dense : RotationKind::hadamard, d);
          const int n_kv = 2, n_q = n_kv * group;
          const int v_bits = (bits % 4) + 1;  // mixed widths: K bits, V (bits mod 4) + 1
          for (auto [kb, vb] : std::vector<std::pair<int, int>>{{bits, bits}, {bits, v_bits}}) {
            const TqPages p = build_pages(d, n_kv, n_ctx, 16, kb, vb, rot, rng);
            const std::vector<float> q_rot = random_vec(size_t(n_q) * d, rng, 2.0f);
            std::vector<float> scalar(size_t(n_q) * d), simd(scalar.size(), -3.0f),
                dispatch(scalar.size(), -5.0f);
            paged_attention_tq_scalar(make_args(p, q_rot.data(), n_q, scalar.data()));
            paged_attention_tq_avx2(make_args(p, q_rot.data(), n_q, simd.data()));
            paged_attention_tq(make_args(p, q_rot.data(), n_q, dispatch.data()));
            EXPECT_LE(relative_diff(simd, scalar), 1e-5f) << "k_bits=" << kb << " v_bits=" << vb;
            EXPECT_EQ(dispatch, simd);
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

TEST(TqAttention, EmptyContextGivesZeros) {
  const int d = 64;
  std::vector<float> q(2 * d, 1.0f), out(2 * d, 9.0f);
  const Codebook& cb = codebook_for(d, 4);
  TqAttentionArgs a;
  a.q_rot = q.data();
  a.n_q_heads = 2;
  a.n_kv_heads = 1;
  a.head_dim = d;
  a.k_codebook = a.v_codebook = cb.centroids.data();
  a.out_rot = out.data();
  a.n_ctx = 0;
  paged_attention_tq_scalar(a);
  for (float o : out) EXPECT_EQ(o, 0.0f);
  std::fill(out.begin(), out.end(), 9.0f);
  paged_attention_tq(a);
  for (float o : out) EXPECT_EQ(o, 0.0f);
}

TEST(TqAttention, BadArgumentsFail) {
  const int d = 64;
  std::mt19937 rng(5);
  const TqPages p = build_pages(d, 2, 10, 4, 4, 4, rotation_for(RotationKind::dense, d), rng);
  std::vector<float> q(6 * d, 0.5f), out(6 * d);
  TqAttentionArgs a = make_args(p, q.data(), 6, out.data());
  EXPECT_NO_THROW(paged_attention_tq(a));
  TqAttentionArgs bad = a;
  bad.n_q_heads = 5;  // not a multiple of n_kv_heads
  EXPECT_THROW(paged_attention_tq(bad), Error);
  bad = a;
  bad.k_bits = 5;
  EXPECT_THROW(paged_attention_tq_scalar(bad), Error);
  bad = a;
  bad.v_bits = 0;
  EXPECT_THROW(paged_attention_tq(bad), Error);
  bad = a;
  bad.head_dim = 60;  // 3 bits need a multiple of 8
  bad.k_bits = 3;
  EXPECT_THROW(paged_attention_tq_scalar(bad), Error);
  bad = a;
  bad.head_dim = 1024;
  EXPECT_THROW(paged_attention_tq(bad), Error);
  bad = a;
  bad.block_size = 0;
  EXPECT_THROW(paged_attention_tq(bad), Error);
  bad = a;
  bad.out_rot = nullptr;
  EXPECT_THROW(paged_attention_tq(bad), Error);
}

}  // namespace
}  // namespace tq
