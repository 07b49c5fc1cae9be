// KV cache events: what the block pool tells an outside index (a KV-aware router) as its prefix
// cache changes, in vLLM's terms (its kv_events: BlockStored, BlockRemoved, AllBlocksCleared).
// A block's hash is the pool's own chained content hash (kv/block_pool.h): opaque to a router,
// which matches requests by the token ids of the stored blocks and drops blocks by hash.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "tokens/token_id.h"

namespace tq {

struct KvCacheEvent {
  enum class Kind { block_stored, block_removed, all_blocks_cleared };
  Kind kind = Kind::all_blocks_cleared;
  std::vector<uint64_t> block_hashes;    // stored / removed: consecutive blocks of one chain (stored)
  std::optional<uint64_t> parent_hash;   // stored: the hash of the block before the first; none at the start
  std::vector<TokenId> token_ids;        // stored: the blocks' tokens, block_size per block
  int block_size = 0;                    // stored
};

}  // namespace tq
