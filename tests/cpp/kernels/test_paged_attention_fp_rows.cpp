// Paged FP attention equals plain attention over contiguous rows, for every FP cache dtype,
// block size and GQA grouping; and block placement (scattered block tables) does not matter.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/paged_attention.h"
#include "errors/error.h"
#include "kv/kv_cache.h"

namespace tq {
namespace {

struct Case {
  KvDtype dtype;
  int block_size;
  int n_q_heads;
  int n_kv_heads;
  int head_dim;
  int n_ctx;
};

class PagedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttentionTest, MatchesContiguousReference) {
  const Case c = GetParam();
  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int kv_dim = c.n_kv_heads * c.head_dim;
  std::vector<float> k(static_cast<size_t>(c.n_ctx) * kv_dim), v(k.size()), q(static_cast<size_t>(c.n_q_heads) * c.head_dim);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  for (float& x : q) x = normal(rng);

  // A cache with more blocks than needed; the sequence's blocks have holes between them.
  const int needed = (c.n_ctx + c.block_size - 1) / c.block_size;
  KvCache cache({1, c.n_kv_heads, c.head_dim, c.block_size, c.dtype, c.dtype}, needed * 2 + 3);
  BlockTable table;
  for (int i = 0; i < needed; ++i) table.blocks.push_back(2 * i + 1);
  for (int t = 0; t < c.n_ctx; ++t) cache.write(0, table, t, k.data() + t * kv_dim, v.data() + t * kv_dim);

  // The reference sees exactly what the cache stores (rounded to the cache dtype).
  std::vector<float> k_stored(k.size()), v_stored(v.size());
  std::vector<uint8_t> row(kv_row_bytes(c.dtype, c.head_dim));
  for (size_t r = 0; r < k.size() / c.head_dim; ++r) {
    kv_encode_row(c.dtype, k.data() + r * c.head_dim, c.head_dim, row.data());
    kv_decode_row(c.dtype, row.data(), c.head_dim, k_stored.data() + r * c.head_dim);
    kv_encode_row(c.dtype, v.data() + r * c.head_dim, c.head_dim, row.data());
    kv_decode_row(c.dtype, row.data(), c.head_dim, v_stored.data() + r * c.head_dim);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  std::vector<float> expected(q.size()), got(q.size());
  attention_reference(q.data(), k_stored.data(), v_stored.data(), c.n_q_heads, c.n_kv_heads, c.head_dim, c.n_ctx, scale,
                      expected.data());
  PagedAttentionArgs a;
  a.q = q.data();
  a.n_q_heads = c.n_q_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.head_dim = c.head_dim;
  a.block_table = table.blocks.data();
  a.block_size = c.block_size;
  a.n_ctx = c.n_ctx;
  a.k = cache.k_pages(0);
  a.v = cache.v_pages(0);
  a.scale = scale;
  a.out = got.data();
  paged_attention_exact(a);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 2e-5f) << "at " << i;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionTest,
    ::testing::Values(Case{KvDtype::F32, 16, 4, 2, 32, 1}, Case{KvDtype::F32, 16, 4, 2, 32, 37},
                      Case{KvDtype::F32, 128, 8, 8, 64, 300}, Case{KvDtype::BF16, 16, 6, 2, 64, 100},
                      Case{KvDtype::F16, 16, 8, 1, 128, 65}, Case{KvDtype::F16, 1, 2, 1, 16, 9},
                      Case{KvDtype::BF16, 128, 14, 2, 64, 129}));

}  // namespace
}  // namespace tq
