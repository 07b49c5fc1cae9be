// kv/block_pool.h's event log (vLLM's KV cache events): every block the prefix cache gains is
// announced once with its tokens, chained by parent hash; every block it forgets is withdrawn by
// the same hash; nothing is logged unless asked.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "kv/block_pool.h"

namespace tq {
namespace {

std::vector<TokenId> seq(int n, int start) {
  std::vector<TokenId> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(BlockPoolEvents, StoredBlocksCarryTokensAndChainAndEvictionsWithdrawThem) {
  BlockPool pool(4, 4, "f16");
  pool.record_events(true);
  const auto a = seq(10, 100);  // 2 full blocks + 2 tokens
  BlockTable ta;
  BlockHashes ha;
  ASSERT_TRUE(pool.allocate(ta, 10));
  pool.cache_full_blocks(a, 4, ta, ha);   // first block full
  pool.cache_full_blocks(a, 10, ta, ha);  // second block full; the first is not announced again
  std::vector<KvCacheEvent> ev = pool.take_events();
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, KvCacheEvent::Kind::block_stored);
  EXPECT_FALSE(ev[0].parent_hash.has_value());
  EXPECT_EQ(ev[0].token_ids, seq(4, 100));
  EXPECT_EQ(ev[0].block_size, 4);
  ASSERT_EQ(ev[1].block_hashes.size(), 1u);
  EXPECT_EQ(ev[1].parent_hash, ev[0].block_hashes[0]);
  EXPECT_EQ(ev[1].token_ids, seq(4, 104));
  EXPECT_EQ(ev[1].block_hashes[0], ha.hashes[1]);
  EXPECT_TRUE(pool.take_events().empty());  // handed over once

  // A second sequence with the same prefix shares the blocks: nothing new to announce.
  BlockTable tb;
  BlockHashes hb;
  EXPECT_EQ(pool.acquire_cached_prefix(a, tb, hb), 8);
  ASSERT_TRUE(pool.allocate(tb, 10));
  pool.cache_full_blocks(a, 10, tb, hb);
  EXPECT_TRUE(pool.take_events().empty());
  pool.free(tb, hb);
  pool.free(ta, ha);

  // Other tokens need every block: the two cached ones are evicted and withdrawn.
  const auto c = seq(16, 500);
  BlockTable tc;
  BlockHashes hc;
  ASSERT_TRUE(pool.allocate(tc, 16));
  ev = pool.take_events();
  std::set<uint64_t> removed;
  for (const KvCacheEvent& e : ev) {
    ASSERT_EQ(e.kind, KvCacheEvent::Kind::block_removed);
    removed.insert(e.block_hashes.begin(), e.block_hashes.end());
  }
  EXPECT_EQ(removed, (std::set<uint64_t>{ha.hashes[0], ha.hashes[1]}));
  // All four blocks at once: one event with the run of four.
  pool.cache_full_blocks(c, 16, tc, hc);
  ev = pool.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].block_hashes, hc.hashes);
  EXPECT_EQ(ev[0].token_ids, c);
  const std::set<uint64_t> c_hashes(hc.hashes.begin(), hc.hashes.end());
  pool.free(tc, hc);
  pool.reset_prefix_cache();
  ev = pool.take_events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KvCacheEvent::Kind::block_removed);
  EXPECT_EQ(std::set<uint64_t>(ev[0].block_hashes.begin(), ev[0].block_hashes.end()), c_hashes);
}

TEST(BlockPoolEvents, NothingIsLoggedUnlessAsked) {
  BlockPool pool(4, 4, "f16");
  const auto a = seq(8, 7);
  BlockTable t;
  BlockHashes h;
  ASSERT_TRUE(pool.allocate(t, 8));
  pool.cache_full_blocks(a, 8, t, h);
  EXPECT_EQ(pool.num_cached(), 2);
  EXPECT_TRUE(pool.take_events().empty());
  pool.free(t, h);
}

}  // namespace
}  // namespace tq
