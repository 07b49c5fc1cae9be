// engine/scheduler.h on its own (no model): the token budget and chunked prefill, first come
// first served admission within max_num_seqs, preemption of the newest running request when
// blocks run out (its blocks freed, back to the front of the queue, recomputed later), and
// prefix-cache hits on admission.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <vector>

#include "engine/request.h"
#include "engine/scheduler.h"
#include "errors/error.h"
#include "kv/block_pool.h"

namespace tq {
namespace {

std::unique_ptr<Request> request(uint64_t id, int prompt_tokens, int first_token = 100) {
  std::vector<TokenId> prompt(prompt_tokens);
  std::iota(prompt.begin(), prompt.end(), first_token);
  return std::make_unique<Request>(id, std::move(prompt), SamplingParams{});
}

// What the engine does after the forward pass: the chunk's tokens are in the cache, and a
// request that caught up gets one more token (as if sampled).
void computed(const SchedulerOutput& plan, BlockPool& pool) {
  for (const ScheduledChunk& c : plan.chunks) {
    Request& r = *c.request;
    r.num_computed += c.num_tokens;
    r.table.num_tokens = r.num_computed;
    pool.cache_full_blocks(r.tokens, r.num_computed, r.table, r.hashes);
    if (r.num_computed == r.num_tokens()) r.tokens.push_back(7);
  }
}

std::vector<std::pair<uint64_t, int>> chunks(const SchedulerOutput& plan) {
  std::vector<std::pair<uint64_t, int>> out;
  for (const ScheduledChunk& c : plan.chunks) out.emplace_back(c.request->id, c.num_tokens);
  return out;
}

using Chunks = std::vector<std::pair<uint64_t, int>>;

TEST(Scheduler, TheBudgetChunksPromptsFirstComeFirstServed) {
  BlockPool pool(64, 4, "f16");
  Scheduler s({/*max_num_batched_tokens=*/16, /*max_num_seqs=*/8}, pool);
  auto a = request(1, 10), b = request(2, 10, 200), c = request(3, 10, 300);  // no shared prefix
  s.add(a.get());
  s.add(b.get());
  s.add(c.get());
  SchedulerOutput p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{1, 10}, {2, 6}}));  // b's prompt is chunked; c waits
  EXPECT_EQ(p.total_tokens, 16);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1);
  computed(p, pool);
  p = s.schedule();  // a decodes (1), b finishes its prompt (4), c gets the rest of the budget
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 4}, {3, 10}}));
  computed(p, pool);
  p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 1}, {3, 1}}));
  std::vector<const BlockTable*> tables = s.tables();
  pool.check_consistency(tables);
  for (Request* r : {a.get(), b.get(), c.get()}) s.remove(r);
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(pool.num_free(), 64);
}

TEST(Scheduler, MaxNumSeqsHoldsTheRestBack) {
  BlockPool pool(64, 4, "f16");
  Scheduler s({64, 2}, pool);
  auto a = request(1, 3), b = request(2, 3), c = request(3, 3);
  for (Request* r : {a.get(), b.get(), c.get()}) s.add(r);
  SchedulerOutput p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{1, 3}, {2, 3}}));
  computed(p, pool);
  s.remove(a.get());  // finished: c takes its place
  p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{2, 1}, {3, 3}}));
  s.remove(b.get());
  s.remove(c.get());
}

TEST(Scheduler, TheNewestRunningRequestIsPreemptedAndComesBackFirst) {
  // 4 blocks of 4 tokens: two requests of 7 tokens take 2 blocks each; the first to need a
  // third block makes the newer one give its blocks back.
  BlockPool pool(4, 4, "f16", /*enable_prefix_caching=*/false);
  Scheduler s({64, 8}, pool);
  auto a = request(1, 7), b = request(2, 7, 500), c = request(3, 2, 900);
  s.add(a.get());
  s.add(b.get());
  SchedulerOutput p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{1, 7}, {2, 7}}));
  computed(p, pool);  // both now hold 8 tokens: their next token fits their second block
  s.add(c.get());
  p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 1}}));  // c waits: no block is free
  computed(p, pool);  // 9 tokens each: the next step needs a third block for both
  p = s.schedule();
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], b.get());
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}}));  // no admission in a step that preempted
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(b->table.blocks.empty());
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(b->status, RequestStatus::waiting);
  computed(p, pool);
  s.remove(a.get());  // a finishes: b, at the front of the queue, is recomputed before c
  p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{2, 9}, {3, 2}}));
  EXPECT_TRUE(p.preempted.empty());
  s.remove(b.get());
  s.remove(c.get());
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(Scheduler, ARequestPreemptsItselfWhenItIsTheNewest) {
  BlockPool pool(2, 4, "f16", false);
  Scheduler s({64, 8}, pool);
  auto a = request(1, 8);
  s.add(a.get());
  SchedulerOutput p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{1, 8}}));
  computed(p, pool);  // 9 tokens need a third block, which does not exist
  p = s.schedule();
  EXPECT_TRUE(p.empty());
  ASSERT_EQ(p.preempted.size(), 1u);
  EXPECT_EQ(p.preempted[0], a.get());
  EXPECT_EQ(pool.num_free(), 2);
  s.remove(a.get());
}

TEST(Scheduler, AdmissionSharesTheCachedPrefix) {
  BlockPool pool(16, 4, "f16");
  Scheduler s({64, 8}, pool);
  auto a = request(1, 10);
  s.add(a.get());
  SchedulerOutput p = s.schedule();
  computed(p, pool);  // a's two full prompt blocks are cached
  auto b = request(2, 10);  // the same prompt
  s.add(b.get());
  p = s.schedule();
  EXPECT_EQ(chunks(p), (Chunks{{1, 1}, {2, 2}}));  // b computes only its last 2 tokens
  EXPECT_EQ(b->num_cached_tokens, 8);
  EXPECT_EQ(b->table.blocks[0], a->table.blocks[0]);
  EXPECT_EQ(pool.stats().hits, 8u);
  s.remove(a.get());
  s.remove(b.get());
}

TEST(Scheduler, LimitsBelowOneAreRefused) {
  BlockPool pool(4, 4, "f16");
  EXPECT_THROW(Scheduler({0, 8}, pool), Error);
  EXPECT_THROW(Scheduler({8, 0}, pool), Error);
}

}  // namespace
}  // namespace tq
