// kv/block_pool.h: prefix blocks are shared by content and KV mode, evicted least recently freed
// first and only when nothing holds them, reference counts stay consistent.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kv/block_pool.h"

namespace tq {
namespace {

std::vector<TokenId> seq(int n, int start = 100) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

void check(const BlockPool& pool, std::initializer_list<const BlockTable*> tables) {
  std::vector<const BlockTable*> t(tables);
  pool.check_consistency(t);
}

TEST(BlockPool, FullBlocksAreSharedAndTheLastTokenIsAlwaysComputed) {
  BlockPool pool(8, 4, "f16");
  const auto tokens = seq(10);  // 2 full blocks + 2
  BlockTable a;
  BlockHashes ha;
  EXPECT_EQ(pool.acquire_cached_prefix(tokens, a, ha), 0);
  ASSERT_TRUE(pool.allocate(a, 10));
  pool.cache_full_blocks(tokens, 10, a, ha);
  EXPECT_EQ(pool.num_cached(), 2);
  BlockTable b;
  BlockHashes hb;
  EXPECT_EQ(pool.acquire_cached_prefix(tokens, b, hb), 8);
  EXPECT_EQ(std::vector<int32_t>(b.blocks.begin(), b.blocks.end()), std::vector<int32_t>(a.blocks.begin(), a.blocks.begin() + 2));
  check(pool, {&a, &b});
  // Exactly 8 tokens: only the first block may be shared (one token must be computed).
  BlockTable c;
  BlockHashes hc;
  EXPECT_EQ(pool.acquire_cached_prefix(seq(8), c, hc), 4);
  EXPECT_EQ(pool.stats().queries, 10u + 10u + 8u);
  EXPECT_EQ(pool.stats().hits, 8u + 4u);
  pool.free(a);
  pool.free(b);
  pool.free(c);
  check(pool, {});
  EXPECT_EQ(pool.num_free(), 8);
}

TEST(BlockPool, AllocationIsAllOrNothingAndEveryBlockIsHandedOutOnce) {
  KvCache cache({2, 2, 8, 4, KvDtype::F32, KvDtype::F32}, 3);
  BlockPool pool(cache);
  BlockTable a, b;
  ASSERT_TRUE(pool.allocate(a, 9));  // 3 blocks of 4
  std::vector<int32_t> ids(a.blocks.begin(), a.blocks.end());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(pool.allocate(b, 1));
  EXPECT_TRUE(b.blocks.empty());
  const BlockTable stale = a;
  pool.free(a);
  EXPECT_EQ(pool.num_free(), 3);
  BlockTable twice = stale;
  EXPECT_THROW(pool.free(twice), Error);  // freed once already
  ASSERT_TRUE(pool.allocate(b, 2));
  EXPECT_FALSE(pool.allocate(b, 13));  // would need 4 blocks: keeps the one it had
  EXPECT_EQ(b.blocks.size(), 1u);
  pool.free(b);
  check(pool, {});
}

TEST(BlockPool, ADifferentModeOrPrefixDoesNotMatch) {
  BlockPool f16(8, 4, "f16"), tq4(8, 4, "tq4");
  const auto tokens = seq(9);
  for (BlockPool* p : {&f16, &tq4}) {
    BlockTable t;
    BlockHashes h;
    p->acquire_cached_prefix(tokens, t, h);
    ASSERT_TRUE(p->allocate(t, 9));
    p->cache_full_blocks(tokens, 9, t, h);
    BlockTable u;
    BlockHashes hu;
    auto other = tokens;
    other[1] = 7;  // first block differs: the chain breaks at once
    EXPECT_EQ(p->acquire_cached_prefix(other, u, hu), 0);
    auto later = tokens;
    later[5] = 7;  // second block differs: the first still matches
    BlockTable v;
    BlockHashes hv;
    EXPECT_EQ(p->acquire_cached_prefix(later, v, hv), 4);
    p->free(v);
    p->free(t);
  }
  BlockHashes a, b;
  BlockTable ta, tb;
  f16.acquire_cached_prefix(tokens, ta, a, false);
  tq4.acquire_cached_prefix(tokens, tb, b, false);
  EXPECT_NE(a.hashes[0], b.hashes[0]);  // the mode salts the chain
  f16.free(ta);
  tq4.free(tb);
}

TEST(BlockPool, FreeCachedBlocksAreEvictedOldestFirstAndHeldOnesNever) {
  BlockPool pool(4, 2, "f16");
  BlockTable a, b;
  BlockHashes ha, hb;
  const auto ta = seq(5, 10), tb = seq(5, 50);
  pool.acquire_cached_prefix(ta, a, ha);
  ASSERT_TRUE(pool.allocate(a, 5));  // 3 blocks
  pool.cache_full_blocks(ta, 5, a, ha);
  pool.free(a);  // 2 cached blocks free (tail first), 1 uncached free
  EXPECT_EQ(pool.num_cached(), 2);
  pool.acquire_cached_prefix(tb, b, hb);
  // 3 blocks: the two uncached ones, then ta's second block (freed before its first).
  ASSERT_TRUE(pool.allocate(b, 5));
  EXPECT_EQ(pool.num_cached(), 1);
  BlockTable again;
  BlockHashes hagain;
  EXPECT_EQ(pool.acquire_cached_prefix(ta, again, hagain), 2);  // ta's first block survived
  EXPECT_FALSE(pool.allocate(b, 7));  // a 4th block: none is free (the last is held by `again`)
  EXPECT_EQ(b.blocks.size(), 3u);     // unchanged
  check(pool, {&b, &again});
  pool.free(b);
  pool.free(again);
  pool.reset_prefix_cache();
  EXPECT_EQ(pool.num_cached(), 0);
  check(pool, {});
}

}  // namespace
}  // namespace tq
