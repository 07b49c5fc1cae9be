// The root of batch invariance, shared by the engine's tests: a token's logits are the same bits
// whether its sequence runs alone, one token a step, or in chunks of up to max_chunk tokens inside
// batches that also carry other sequences' prefill chunks and decode tokens.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "model/transformer.h"

namespace tq::test {

// prompts[0] is checked; prompts[1..] fill the batches. The cache needs room for all of them.
inline void expect_logits_independent_of_batch(Transformer& model, KvCache& cache,
                                               const std::vector<std::vector<TokenId>>& prompts, int vocab,
                                               unsigned seed, int max_chunk) {
  const int n = static_cast<int>(prompts.size());
  BlockPool pool(cache);
  std::vector<BlockTable> tables(n);
  for (int i = 0; i < n; ++i) ASSERT_TRUE(pool.allocate(tables[i], int(prompts[i].size()) + 1));
  // Sequence 0 alone, one token at a time.
  std::vector<std::vector<float>> alone;
  std::vector<float> logits;
  for (size_t p = 0; p < prompts[0].size(); ++p) {
    ForwardBatch b;
    b.add(prompts[0][p], int(p), &tables[0], true);
    model.forward(b, cache, logits);
    alone.push_back(logits);
  }
  // Sequence 0 again (same blocks, rewritten) inside batches of the others' chunks.
  std::vector<int> other_pos(n, 0);
  std::mt19937 rng(seed);
  for (size_t p = 0; p < prompts[0].size();) {
    ForwardBatch b;
    for (int s = 1; s < n; ++s) {
      const int k_max = int(rng() % 6);
      for (int k = 0; k < k_max && other_pos[s] < int(prompts[s].size()); ++k, ++other_pos[s])
        b.add(prompts[s][other_pos[s]], other_pos[s], &tables[s], k % 2 == 0);
    }
    const int row = int(b.logit_rows.size());
    const int chunk = std::min<int>(1 + int(rng() % max_chunk), int(prompts[0].size() - p));
    for (int k = 0; k < chunk; ++k) b.add(prompts[0][p + k], int(p + k), &tables[0], true);
    model.forward(b, cache, logits);
    for (int k = 0; k < chunk; ++k)
      ASSERT_EQ(0, std::memcmp(logits.data() + size_t(row + k) * vocab, alone[p + k].data(), vocab * sizeof(float)))
          << "position " << p + k << " in a batch of " << b.size();
    p += chunk;
  }
  for (auto& t : tables) pool.free(t);
}

}  // namespace tq::test
