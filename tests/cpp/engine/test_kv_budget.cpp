// engine/kv_budget.h: the KV budget halves on allocation failure down to one request, freeing every
// partial allocation, and refuses with the sizes when even that fails.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/kv_budget.h"
#include "errors/error.h"
#include "kv/kv_cache.h"

namespace tq {
namespace {

KvCacheShape small_shape() { return KvCacheShape{2, 2, 64, 16, KvDtype::F16, KvDtype::F16}; }

TEST(KvBudget, HalvesOnAllocationFailureAndFreesPartialAllocations) {
  const KvCacheShape shape = small_shape();
  KvSizing s;
  s.bytes_per_block = shape.bytes_per_block();
  s.block_size = 16;
  s.max_model_len = 64;  // 4 blocks
  s.mode = "f16";
  s.budget_bytes = 64 * s.bytes_per_block;
  const size_t live_before = kv_cache_live_arena_bytes();
  // The first try fails at its K arena, the second at its V arena (its K arena must then be
  // freed), the third (16 blocks) succeeds.
  int calls = 0;
  std::vector<std::string> log;
  auto make = [&](int blocks) {
    ++calls;
    if (calls == 1) kv_cache_inject_allocation_failures(1);
    if (calls == 2) kv_cache_inject_allocation_failures(1, 1);
    return std::make_unique<KvCache>(shape, blocks);
  };
  {
    auto cache = allocate_kv_cache(s, make, &log);
    EXPECT_EQ(cache->num_blocks(), 16);
    EXPECT_EQ(log.size(), 2u);
    EXPECT_EQ(kv_cache_live_arena_bytes() - live_before, cache->total_bytes());
  }
  EXPECT_EQ(kv_cache_live_arena_bytes(), live_before);
  // Every try fails: down to 4 blocks, then the sizing error with the numbers.
  kv_cache_inject_allocation_failures(1000);
  try {
    allocate_kv_cache(s, [&](int blocks) { return std::make_unique<KvCache>(shape, blocks); });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--max-model-len 64"), std::string::npos) << m;
    EXPECT_NE(m.find("MiB"), std::string::npos) << m;
  }
  kv_cache_inject_allocation_failures(0);
  EXPECT_EQ(kv_cache_live_arena_bytes(), live_before);
}

TEST(KvBudget, RefusesABudgetBelowOneRequestWithTheLongestContextThatFits) {
  const KvCacheShape shape = small_shape();
  KvSizing s;
  s.bytes_per_block = shape.bytes_per_block();
  s.block_size = 16;
  s.max_model_len = 1000;
  s.mode = "f16";
  s.budget_bytes = 10 * s.bytes_per_block;
  try {
    allocate_kv_cache(s, [&](int blocks) { return std::make_unique<KvCache>(shape, blocks); });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("longest context that fits is 160 tokens"), std::string::npos) << m;
  }
  EXPECT_EQ(parse_byte_size("2GiB", "--x"), size_t(2) << 30);
  EXPECT_EQ(parse_byte_size("512MiB", "--x"), size_t(512) << 20);
  EXPECT_EQ(parse_byte_size("1000", "--x"), 1000u);
  EXPECT_THROW(parse_byte_size("lots", "--x"), Error);
  EXPECT_THROW(parse_byte_size("5 parsecs", "--x"), Error);
  EXPECT_THROW(parse_byte_size("-1G", "--x"), Error);
}

}  // namespace
}  // namespace tq
