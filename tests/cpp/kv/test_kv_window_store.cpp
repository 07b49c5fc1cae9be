// The window blocks of a KV cache (kv/kv_window_store.h) and how the block pool uses them
// (kv/block_pool.h): attach hands out free window blocks, then the longest-unused one; a block
// with users keeps its window; a prefix hit is cut back to where the windows it needs survive.
#include <gtest/gtest.h>

#include <vector>

#include "errors/error.h"
#include "kv/block_pool.h"
#include "kv/kv_window_store.h"

namespace tq {
namespace {

TEST(KvWindowStore, AttachTakesFreeThenLongestUnusedAndNeverAUsedOne) {
  KvWindowStore s(6, 2);
  EXPECT_TRUE(s.attach(0));
  EXPECT_TRUE(s.attach(1));
  EXPECT_EQ(s.num_available(), 0);
  EXPECT_FALSE(s.attach(2)) << "both window blocks have users";
  s.drop_user(1);
  s.drop_user(0);  // 1 unused longest, then 0
  EXPECT_EQ(s.num_available(), 2);
  const int w1 = s.window_of()[1];
  ASSERT_TRUE(s.attach(2));
  EXPECT_EQ(s.window_of()[2], w1) << "the longest-unused window block moves";
  EXPECT_FALSE(s.has_window(1));
  EXPECT_TRUE(s.has_window(0));
  ASSERT_TRUE(s.attach(0));  // keeps its own window block
  EXPECT_EQ(s.users(0), 1);
  s.check_consistency({1, 0, 1, 0, 0, 0});
  EXPECT_THROW(s.check_consistency({1, 1, 1, 0, 0, 0}), Error);
  EXPECT_THROW(s.drop_user(4), Error);
  EXPECT_THROW(s.add_user(4), Error);
  EXPECT_THROW(KvWindowStore(4, 0), Error);
}

TEST(KvWindowStore, ServingSizeCoversEveryRunningSequence) {
  // 8 sequences x (1 sink block + 2 recent blocks + 2) + 512 / 16 new-token blocks.
  EXPECT_EQ(window_blocks_for_serving(4, 24, 16, 8, 512, 1 << 20), 8 * 5 + 32);
  EXPECT_EQ(window_blocks_for_serving(4, 24, 16, 8, 512, 50), 50);
}

KvWindows sink_and_recent(int sink, int recent) {
  KvWindows w;
  w.sink_tokens = sink;
  w.recent_tokens = recent;
  return w;
}

TEST(BlockPoolWindows, UsersFollowTheSequenceAndHitsNeedTheirWindows) {
  KvWindowStore store(16, 16);
  BlockPool pool(16, 4, "test", true, &store, sink_and_recent(2, 6));
  std::vector<TokenId> tokens(22);
  for (int i = 0; i < 22; ++i) tokens[i] = 100 + i;
  BlockTable a;
  BlockHashes ha;
  EXPECT_EQ(pool.acquire_cached_prefix(tokens, a, ha), 0);
  ASSERT_TRUE(pool.allocate(a, 22));  // 6 blocks, each with a window user
  for (int32_t b : a.blocks) EXPECT_EQ(store.users(b), 1);
  pool.cache_full_blocks(tokens, 22, a, ha);
  pool.release_old_windows(a, 22);  // a query at 22 reads rows 0-1 and 17-22: blocks 0, 4, 5
  const std::vector<int> users_a = {1, 0, 0, 0, 1, 1};
  for (size_t i = 0; i < a.blocks.size(); ++i) EXPECT_EQ(store.users(a.blocks[i]), users_a[i]) << "block index " << i;
  std::vector<const BlockTable*> tables = {&a};
  pool.check_consistency(tables);

  // A second sequence with the same 22 tokens hits blocks 0-4 (20 tokens): its first query at 20
  // reads rows 15-19 (blocks 3 and 4) and the sinks (block 0), all still attached.
  BlockTable b;
  BlockHashes hb;
  EXPECT_EQ(pool.acquire_cached_prefix(tokens, b, hb), 20);
  tables.push_back(&b);
  pool.check_consistency(tables);
  pool.free(b);
  tables.pop_back();

  pool.free(a);
}

TEST(BlockPoolWindows, AHitIsCutBackWhereItsWindowsWereHandedOn) {
  KvWindowStore store(16, 7);
  BlockPool pool(16, 4, "test", true, &store, sink_and_recent(2, 6));
  std::vector<TokenId> tokens(22), other(20, 7);
  for (int i = 0; i < 22; ++i) tokens[i] = 100 + i;
  BlockTable a, x, b;
  BlockHashes ha, hx, hb;
  pool.acquire_cached_prefix(tokens, a, ha);
  ASSERT_TRUE(pool.allocate(a, 22));
  pool.cache_full_blocks(tokens, 22, a, ha);
  pool.release_old_windows(a, 22);  // blocks 1-3 unused (longest), then 0, 4, 5 when released
  const std::vector<int32_t> a_blocks = a.blocks;
  pool.free(a);
  // 5 new blocks: a's uncached last block first (it keeps its window block), then 4 more that take
  // the one free window block and those of a's blocks 1, 2 and 3.
  pool.acquire_cached_prefix(other, x, hx);
  ASSERT_TRUE(pool.allocate(x, 20));
  EXPECT_EQ(x.blocks[0], a_blocks[5]);
  for (int i : {1, 2, 3}) EXPECT_FALSE(store.has_window(a_blocks[i])) << "block index " << i;
  // The whole run of 5 cached blocks matches, but a query at 20, 16, 12 or 8 reads a recent row
  // of blocks 1-3; at 4 it reads rows 0-3 (block 0, attached).
  EXPECT_EQ(pool.acquire_cached_prefix(tokens, b, hb), 4);
  EXPECT_EQ(b.blocks, std::vector<int32_t>{a_blocks[0]});
  std::vector<const BlockTable*> tables = {&x, &b};
  pool.check_consistency(tables);
  // Every window block now has users: no block can be given one, so allocation waits.
  BlockTable y;
  BlockHashes hy;
  pool.acquire_cached_prefix(std::vector<TokenId>(12, 9), y, hy);
  EXPECT_EQ(store.num_available(), 1);  // a's block 4's
  EXPECT_FALSE(pool.allocate(y, 12));
  EXPECT_TRUE(y.blocks.empty());
  pool.free(x);
  pool.free(b);
  tables.clear();
  pool.check_consistency(tables);
}

}  // namespace
}  // namespace tq
