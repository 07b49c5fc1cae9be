// The serving engine's view of the KV cache's blocks: which block ids are free, how many
// sequences share each block (reference counts), and the prefix cache.
//
// Prefix caching (as vLLM v1): once a block is full its tokens are known for good, so it gets a
// hash chained from the previous block's hash and its own tokens (xxHash3), salted with the KV
// mode (a tq4 block is no use to an f16 run). A new request looks its prompt's full blocks up in
// order and shares every block that matches instead of computing it again. Blocks nobody uses
// go to the free queue but keep their contents and hash until they are handed out again: the
// queue's front is the least recently freed (evicted first). A sequence's blocks are freed last
// block first, so the tail of a prefix is evicted before its head.
//
// Full-precision windows (kv/kv_windows.h, kv/kv_window_store.h): a block gets a window block
// when it is allocated, and a table holds a window user on its sink blocks and on the blocks its
// recent window still covers (release_old_windows drops the rest as the sequence advances). A
// prefix-cache hit is cut back to the longest run whose needed windows are still attached, so a
// query reads the same full-precision rows whether its prefix was hit or computed.
//
// The only allocator of a cache's blocks: the serving engine's, and (with prefix caching off)
// every single-sequence user's: calibration, eval, tests.
//
// Single-threaded: the engine's step loop (or the single-sequence user) is its only user.
#pragma once
#include <cstdint>
#include <list>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/kv_events.h"
#include "tokens/token_id.h"

namespace tq {

// A request's chain of full-block hashes: hashes[i] covers tokens [0, (i + 1) * block_size).
struct BlockHashes {
  std::vector<uint64_t> hashes;
};

struct PrefixCacheStats {
  uint64_t queries = 0;  // prompt tokens looked up
  uint64_t hits = 0;     // of those, tokens found cached
};

class BlockPool {
 public:
  // salt: what must differ for blocks to be incompatible (the KV mode's description).
  // windows: the cache's window store and windows (null: none).
  BlockPool(int num_blocks, int block_size, const std::string& salt, bool enable_prefix_caching = true,
            KvWindowStore* windows = nullptr, const KvWindows& window_spec = {});

  // The pool of `cache`'s blocks, salted with its KV mode, with its window blocks.
  explicit BlockPool(KvCache& cache, bool enable_prefix_caching = false);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  // Blocks no sequence holds (cached or not): what allocate() can hand out.
  int num_free() const { return static_cast<int>(free_queue_.size()); }
  // Blocks held by at least one sequence, as a fraction of all.
  double usage() const { return 1.0 - double(num_free()) / num_blocks_; }
  bool prefix_caching() const { return enable_caching_; }
  const PrefixCacheStats& stats() const { return stats_; }
  // Cached blocks (holding a hash), in use or free.
  int num_cached() const { return static_cast<int>(by_hash_.size()); }

  // Shares the longest run of cached blocks that matches the start of `tokens`, leaving at least
  // one token to compute (its logits are needed). Appends the blocks to an empty `table`, fills
  // `hashes` with the chain of every full block of `tokens` and returns the tokens covered.
  // count_stats: add to the hit/query counters (a request's first lookup only).
  int acquire_cached_prefix(std::span<const TokenId> tokens, BlockTable& table, BlockHashes& hashes,
                            bool count_stats = true);

  // Grows `table` to hold `num_tokens`; false, and nothing taken, when too few blocks (or window
  // blocks) are free.
  bool allocate(BlockTable& table, int num_tokens);

  // Windows: drops the table's window users on blocks that no query from `next_position` on
  // reads at full precision (the sink blocks are kept). Not for eval kl --breakdown's coded
  // ranges (a single-sequence user keeps every window block and never calls it).
  void release_old_windows(BlockTable& table, int next_position);

  // Registers the blocks of `table` that `num_computed` tokens fill completely (K/V written) in
  // the prefix cache. tokens: the sequence's tokens (at least num_computed).
  void cache_full_blocks(std::span<const TokenId> tokens, int num_computed, const BlockTable& table,
                         BlockHashes& hashes);

  // Drops the table's references (last block first) and empties it; with `hashes`, forgets the
  // sequence's hash chain too (it is recomputed if the sequence comes back).
  void free(BlockTable& table);
  void free(BlockTable& table, BlockHashes& hashes);

  // Throws when the windows restrict the coded rows to a range (eval kl --breakdown): the
  // serving calls (prefix hits, dropping old windows) assume the default windows.
  void check_serving_windows() const;

  // Forgets every cached block that no sequence holds (vLLM's reset_prefix_cache).
  void reset_prefix_cache();

  // KV cache events: while on, every block the prefix cache gains or loses is logged (a run of
  // blocks registered by one call as one BlockStored); take_events() hands the log over.
  void record_events(bool on) { record_events_ = on; }
  std::vector<KvCacheEvent> take_events() { return std::exchange(events_, {}); }

  // Consistency check for tests and soak runs: reference counts match `tables`, every free block
  // is in the queue once, every hash entry points at a block with that hash. Throws tq::Error.
  void check_consistency(std::span<const BlockTable* const> tables) const;

 private:
  struct Block {
    int ref_count = 0;
    uint64_t hash = 0;
    bool has_hash = false;
    uint64_t parent_hash = 0;           // hash of the previous block in the chain (or the salt)
    std::vector<TokenId> tokens;        // [block_size] when has_hash: checked on every hit
    std::list<int>::iterator in_queue;  // valid when ref_count == 0
  };

  uint64_t chain_hash(uint64_t parent, std::span<const TokenId> block_tokens) const;
  void extend_hashes(std::span<const TokenId> tokens, int num_full_blocks, BlockHashes& hashes) const;
  void take(int block);       // ref_count 0 -> 1 (out of the free queue)
  int sink_blocks() const;
  // Whether a query at `position` finds every window it reads among blocks [0, position / bs).
  bool windows_attached(const BlockTable& table, int position) const;
  // The blocks of `table` a window user is held on: [0, sink) and [first_window_block, size).
  template <class F>
  void for_window_users(const BlockTable& table, F&& f) const;
  void evict_hash(int block);  // forget a free block's hash before it is reused

  int num_blocks_, block_size_;
  uint64_t salt_;
  bool enable_caching_;
  std::vector<Block> blocks_;
  std::list<int> free_queue_;  // front: next to hand out
  std::unordered_map<uint64_t, int> by_hash_;
  PrefixCacheStats stats_;
  bool record_events_ = false;
  std::vector<KvCacheEvent> events_;
  KvWindowStore* windows_ = nullptr;
  KvWindows window_spec_;
};

// A single-sequence user's block table, given back to its pool when it goes out of scope (also
// when an exception leaves it), so the cache's window blocks keep no stale users.
class ScopedBlockTable {
 public:
  explicit ScopedBlockTable(BlockPool& pool) : pool_(pool) {}
  ~ScopedBlockTable() { pool_.free(table_); }
  ScopedBlockTable(const ScopedBlockTable&) = delete;
  ScopedBlockTable& operator=(const ScopedBlockTable&) = delete;

  // Grows the table to hold `num_tokens` (BlockPool::allocate).
  bool allocate(int num_tokens) { return pool_.allocate(table_, num_tokens); }
  BlockTable& table() { return table_; }

 private:
  BlockPool& pool_;
  BlockTable table_;
};

}  // namespace tq
