// The calibrated affine maps of the TurboQuant cache (kv/kv_row_codec.h KvAffine): subtracting a
// key center, scaling key channels and subtracting a value center leave attention exact up to
// quantization error, and on keys with a large per-channel bias and outlier channels (what Qwen2/3
// keys look like) centering keeps tq4 attention from collapsing.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "engine/kv_calibration.h"
#include "errors/error.h"
#include "kernels/paged_attention.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"

namespace tq {
namespace {

constexpr int kD = 64, kKvHeads = 2, kQHeads = 6, kCtx = 200;

struct Data {
  std::vector<float> k, v, q;  // k, v: [ctx, kv heads, d]; q: [q heads, d]
  std::vector<std::vector<float>> k_bias;  // [kv head][d]
};

// Keys: a bias 8x the size of the per-token part, concentrated in 6 outlier channels; values
// and queries ordinary Gaussians.
Data synthetic(uint64_t seed, float bias_size = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n;
  Data x;
  x.k_bias.assign(kKvHeads, std::vector<float>(kD));
  for (auto& b : x.k_bias) {
    for (float& v : b) v = 0.5f * n(rng) * bias_size;
    for (int j : {3, 11, 17, 35, 43, 49}) b[j] = (20.0f + 5.0f * n(rng)) * bias_size;
  }
  x.k.resize(size_t(kCtx) * kKvHeads * kD);
  x.v.resize(x.k.size());
  for (int t = 0; t < kCtx; ++t)
    for (int h = 0; h < kKvHeads; ++h)
      for (int j = 0; j < kD; ++j) {
        x.k[(size_t(t) * kKvHeads + h) * kD + j] = x.k_bias[h][j] + n(rng);
        x.v[(size_t(t) * kKvHeads + h) * kD + j] = n(rng);
      }
  x.q.resize(size_t(kQHeads) * kD);
  for (float& v : x.q) v = 0.6f * n(rng);
  return x;
}

// Attention through the cache as model/layer_blocks.cpp runs it; returns [q heads, d].
std::vector<float> cached_attention(const Data& x, KvDtype dtype, const KvAffine& affine) {
  KvCacheShape shape;
  shape.num_layers = 1, shape.num_kv_heads = kKvHeads, shape.head_dim = kD;
  shape.k_dtype = shape.v_dtype = dtype;
  KvCache cache(shape, kCtx / 16 + 1, KvQuantOptions{}, OutlierPartition{}, affine);
  BlockPool pool(cache);
  BlockTable table;
  EXPECT_TRUE(pool.allocate(table, kCtx));
  for (int t = 0; t < kCtx; ++t)
    cache.write(0, table, t, &x.k[size_t(t) * kKvHeads * kD], &x.v[size_t(t) * kKvHeads * kD]);
  const int group = kQHeads / kKvHeads;
  std::vector<float> q_store(x.q.size()), out_store(x.q.size()), out(x.q.size());
  for (int h = 0; h < kQHeads; ++h) cache.k_codec(0).query_to_storage(&x.q[h * kD], h / group, &q_store[h * kD]);
  PagedAttentionArgs a;
  a.q = q_store.data(), a.n_q_heads = kQHeads, a.n_kv_heads = kKvHeads, a.head_dim = kD;
  a.block_table = table.blocks.data(), a.block_size = shape.block_size, a.n_ctx = kCtx;
  a.k = cache.k_pages(0), a.v = cache.v_pages(0);
  a.scale = 1.0f / std::sqrt(float(kD)), a.out = out_store.data();
  paged_attention_fast(a);
  for (int h = 0; h < kQHeads; ++h) cache.v_codec(0).output_from_storage(&out_store[h * kD], h / group, &out[h * kD]);
  return out;
}

std::vector<float> exact_attention(const Data& x) {
  std::vector<float> out(x.q.size());
  attention_reference(x.q.data(), x.k.data(), x.v.data(), kQHeads, kKvHeads, kD, kCtx, 1.0f / std::sqrt(float(kD)),
                      out.data());
  return out;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) e += (got[i] - want[i]) * (got[i] - want[i]), n += want[i] * want[i];
  return std::sqrt(e / n);
}

KvAffine affine_of(const std::vector<std::vector<float>>& k_mean, const std::vector<std::vector<float>>& k_scale,
                   const std::vector<std::vector<float>>& v_mean) {
  KvAffine a;
  if (!k_mean.empty()) a.k_mean = {k_mean};
  if (!k_scale.empty()) a.k_scale = {k_scale};
  if (!v_mean.empty()) a.v_mean = {v_mean};
  return a;
}

// The maps change nothing but the quantization error: with q8_0 rows (error ~1e-3) on unbiased
// keys, every combination of maps (an arbitrary key center and scale, a value center) gives the
// exact attention.
TEST(KvAffine, MapsAreExactForAttention) {
  const Data x = synthetic(1, /*bias_size=*/0.0f);
  const std::vector<float> want = exact_attention(x);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.3f, 3.0f);
  std::vector<std::vector<float>> scale(kKvHeads, std::vector<float>(kD)), v_mean = scale;
  for (auto& s : scale)
    for (float& v : s) v = u(rng);
  for (auto& m : v_mean)
    for (float& v : m) v = u(rng) - 1.5f;
  std::vector<std::vector<float>> center(kKvHeads, std::vector<float>(kD));
  for (auto& c : center)
    for (float& v : c) v = u(rng) - 1.5f;
  for (const KvAffine& a : {affine_of(center, {}, {}), affine_of(center, scale, {}), affine_of({}, {}, v_mean),
                            affine_of(center, scale, v_mean)}) {
    EXPECT_LT(relative_error(cached_attention(x, KvDtype::Q8_0, a), want), 0.02);
  }
}

// The biased keys: plain tq4 attention is swamped by the bias (its error is relative to |k|, which
// the bias dominates); centering on the calibrated mean removes the bias exactly and leaves tq4
// only the per-token part.
TEST(KvAffine, CenteringKeepsBiasedKeysFromCollapsing) {
  const Data x = synthetic(2);
  const std::vector<float> want = exact_attention(x);
  // The center a calibration would find: the mean key over the first 100 positions.
  std::vector<std::vector<float>> mean(kKvHeads, std::vector<float>(kD, 0.0f));
  for (int t = 0; t < 100; ++t)
    for (int h = 0; h < kKvHeads; ++h)
      for (int j = 0; j < kD; ++j) mean[h][j] += x.k[(size_t(t) * kKvHeads + h) * kD + j] / 100;
  const double plain = relative_error(cached_attention(x, KvDtype::TQ4, {}), want);
  const double centered = relative_error(cached_attention(x, KvDtype::TQ4, affine_of(mean, {}, {})), want);
  const double q4_0h = relative_error(cached_attention(x, KvDtype::Q4_0H, {}), want);
  std::cout << "attention output relative error on biased keys: tq4 plain " << plain << ", tq4 centered "
            << centered << ", q4_0h " << q4_0h << "\n";
  // Measured (least-squares scale): plain 0.315, centered 0.099, q4_0h 0.239.
  EXPECT_LT(centered, 0.4 * plain);
  EXPECT_LT(centered, 0.5 * q4_0h);
  EXPECT_LT(centered, 0.15);
}

TEST(KvAffine, BadMapsAreRejected) {
  EXPECT_THROW(KvRowCodec(KvDtype::F16, kD, 0, {}, {}, {std::vector<float>(kD)}), Error);  // FP rows stay as they are
  EXPECT_THROW(KvRowCodec(KvDtype::TQ4, kD, 0, {}, {}, {std::vector<float>(kD - 1)}), Error);
  EXPECT_THROW(KvRowCodec(KvDtype::TQ4, kD, 0, {}, {}, {}, {std::vector<float>(kD, 0.0f)}), Error);
}

TEST(KvAffine, KeyScaleFollowsKeyAndQueryEnergy) {
  // Channel pairs (Half pairing, d = 8): pair 0 has key energy and no query energy, pair 1 both.
  const std::vector<double> key_var{100, 1, 1, 1, 100, 1, 1, 1}, q_energy{1e-9, 1, 1, 1, 1e-9, 1, 1, 1};
  const std::vector<float> s = key_scale(key_var, q_energy, RopePairing::Half);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_FLOAT_EQ(s[0], s[4]);  // a RoPE pair shares its scale
  EXPECT_GT(s[0], 10 * s[1]);   // key energy queries never read is scaled away
  double log_sum = 0;
  for (float v : s) log_sum += std::log(v);
  EXPECT_NEAR(log_sum, 0.0, 1e-4);  // geometric mean 1
}

}  // namespace
}  // namespace tq
