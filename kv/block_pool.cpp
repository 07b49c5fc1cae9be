#include "kv/block_pool.h"

#include <algorithm>
#include <climits>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "errors/error.h"

namespace tq {

BlockPool::BlockPool(int num_blocks, int block_size, const std::string& salt, bool enable_prefix_caching,
                     KvWindowStore* windows, const KvWindows& window_spec)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      salt_(XXH3_64bits(salt.data(), salt.size())),
      enable_caching_(enable_prefix_caching),
      blocks_(std::max(num_blocks, 0)),
      windows_(windows),
      window_spec_(window_spec) {
  if (num_blocks <= 0 || block_size <= 0)
    fail("block pool needs positive block count and size (got {} blocks of {})", num_blocks, block_size);
  for (int b = 0; b < num_blocks; ++b) blocks_[b].in_queue = free_queue_.insert(free_queue_.end(), b);
}

BlockPool::BlockPool(KvCache& cache, bool enable_prefix_caching)
    : BlockPool(cache.num_blocks(), cache.shape().block_size, cache.shape().describe(), enable_prefix_caching,
                cache.window_store(), cache.shape().windows) {}

void BlockPool::check_serving_windows() const {
  if (windows_ && (window_spec_.coded_from > 0 || window_spec_.coded_to < INT_MAX || window_spec_.coded_last > 0))
    fail("block pool: the coded-range restrictions of eval kl --breakdown are not for serving");
}

uint64_t BlockPool::chain_hash(uint64_t parent, std::span<const TokenId> block_tokens) const {
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent);
}

void BlockPool::extend_hashes(std::span<const TokenId> tokens, int num_full_blocks, BlockHashes& hashes) const {
  for (int i = static_cast<int>(hashes.hashes.size()); i < num_full_blocks; ++i) {
    const uint64_t parent = i == 0 ? salt_ : hashes.hashes[i - 1];
    hashes.hashes.push_back(chain_hash(parent, tokens.subspan(size_t(i) * block_size_, block_size_)));
  }
}

void BlockPool::take(int block) {
  Block& b = blocks_[block];
  if (b.ref_count == 0) free_queue_.erase(b.in_queue);
  ++b.ref_count;
}

void BlockPool::evict_hash(int block) {
  Block& b = blocks_[block];
  if (!b.has_hash) return;
  auto it = by_hash_.find(b.hash);
  const bool indexed = it != by_hash_.end() && it->second == block;
  if (indexed) by_hash_.erase(it);
  b.has_hash = false;
  b.tokens.clear();
  if (!record_events_ || !indexed) return;  // only what was announced is withdrawn
  if (events_.empty() || events_.back().kind != KvCacheEvent::Kind::block_removed)
    events_.emplace_back().kind = KvCacheEvent::Kind::block_removed;
  events_.back().block_hashes.push_back(b.hash);
}

int BlockPool::sink_blocks() const { return (window_spec_.sink_tokens + block_size_ - 1) / block_size_; }

template <class F>
void BlockPool::for_window_users(const BlockTable& table, F&& f) const {
  const int n = static_cast<int>(table.blocks.size());
  const int sinks = std::min(sink_blocks(), n);
  for (int i = 0; i < sinks; ++i) f(table.blocks[i]);
  for (int i = std::max(sinks, table.first_window_block); i < n; ++i) f(table.blocks[i]);
}

bool BlockPool::windows_attached(const BlockTable& table, int position) const {
  const int end = position / block_size_;  // blocks before the query's own
  for (int i = 0; i < std::min(window_spec_.sink_end_block(position, block_size_), end); ++i)
    if (!windows_->has_window(table.blocks[i])) return false;
  for (int i = window_spec_.recent_begin_block(position, block_size_); i < end; ++i)
    if (!windows_->has_window(table.blocks[i])) return false;
  return true;
}

void BlockPool::release_old_windows(BlockTable& table, int next_position) {
  if (!windows_) return;
  check_serving_windows();
  const int n = static_cast<int>(table.blocks.size());
  int& first = table.first_window_block;
  first = std::max(first, sink_blocks());
  const int keep_from = window_spec_.recent_begin_block(next_position, block_size_);
  for (; first < std::min(keep_from, n); ++first) windows_->drop_user(table.blocks[first]);
}

int BlockPool::acquire_cached_prefix(std::span<const TokenId> tokens, BlockTable& table, BlockHashes& hashes,
                                     bool count_stats) {
  if (!table.blocks.empty()) fail("block pool: prefix lookup into a table that already holds blocks");
  hashes.hashes.clear();
  if (!enable_caching_ || tokens.empty()) return 0;
  check_serving_windows();
  const int full = static_cast<int>(tokens.size()) / block_size_;
  extend_hashes(tokens, full, hashes);
  // At least one token must be computed, so a prompt that is all full blocks leaves its last.
  const int max_blocks = static_cast<int>(tokens.size() - 1) / block_size_;
  int hit = 0;
  for (; hit < max_blocks; ++hit) {
    auto it = by_hash_.find(hashes.hashes[hit]);
    if (it == by_hash_.end()) break;
    const Block& b = blocks_[it->second];
    const uint64_t parent = hit == 0 ? salt_ : hashes.hashes[hit - 1];
    const auto block_tokens = tokens.subspan(size_t(hit) * block_size_, block_size_);
    if (b.parent_hash != parent || !std::equal(block_tokens.begin(), block_tokens.end(), b.tokens.begin())) break;
    table.blocks.push_back(it->second);
  }
  if (windows_) {
    // The first query computed reads some of these blocks' windows: cut the hit back until they
    // are all still attached.
    while (hit > 0 && !windows_attached(table, hit * block_size_)) --hit;
    table.blocks.resize(hit);
    table.first_window_block = std::min(window_spec_.recent_begin_block(hit * block_size_, block_size_), hit);
    for_window_users(table, [&](int block) { windows_->add_user(block); });
  }
  for (int32_t block : table.blocks) take(block);
  if (count_stats) {
    stats_.queries += tokens.size();
    stats_.hits += uint64_t(hit) * block_size_;
  }
  return hit * block_size_;
}

bool BlockPool::allocate(BlockTable& table, int num_tokens) {
  const int needed = (num_tokens + block_size_ - 1) / block_size_ - static_cast<int>(table.blocks.size());
  if (needed <= 0) return true;
  if (needed > num_free()) return false;
  // Every new block is written now, so each takes one available window block (a free block's
  // own unused one included).
  if (windows_ && needed > windows_->num_available()) return false;
  for (int i = 0; i < needed; ++i) {
    const int block = free_queue_.front();
    evict_hash(block);
    take(block);
    if (windows_ && !windows_->attach(block)) fail("block pool: no window block left for block {}", block);
    table.blocks.push_back(block);
  }
  return true;
}

void BlockPool::cache_full_blocks(std::span<const TokenId> tokens, int num_computed, const BlockTable& table,
                                  BlockHashes& hashes) {
  if (!enable_caching_) return;
  const int full = std::min(num_computed / block_size_, static_cast<int>(table.blocks.size()));
  extend_hashes(tokens, full, hashes);
  KvCacheEvent* stored = nullptr;  // the run of blocks this call registers, while consecutive
  for (int i = 0; i < full; ++i) {
    Block& b = blocks_[table.blocks[i]];
    const uint64_t h = hashes.hashes[i];
    // Already cached (a shared prefix block, or registered last step), or the same content
    // cached in another block (that one is kept).
    if (b.has_hash || by_hash_.count(h)) {
      stored = nullptr;
      continue;
    }
    b.has_hash = true;
    b.hash = h;
    b.parent_hash = i == 0 ? salt_ : hashes.hashes[i - 1];
    const auto block_tokens = tokens.subspan(size_t(i) * block_size_, block_size_);
    b.tokens.assign(block_tokens.begin(), block_tokens.end());
    by_hash_.emplace(h, table.blocks[i]);
    if (!record_events_) continue;
    if (!stored) {
      stored = &events_.emplace_back();
      stored->kind = KvCacheEvent::Kind::block_stored;
      if (i > 0) stored->parent_hash = hashes.hashes[i - 1];
      stored->block_size = block_size_;
    }
    stored->block_hashes.push_back(h);
    stored->token_ids.insert(stored->token_ids.end(), block_tokens.begin(), block_tokens.end());
  }
}

void BlockPool::free(BlockTable& table) {
  if (windows_) for_window_users(table, [&](int block) { windows_->drop_user(block); });
  table.first_window_block = 0;
  for (auto it = table.blocks.rbegin(); it != table.blocks.rend(); ++it) {
    Block& b = blocks_[*it];
    if (b.ref_count <= 0) fail("block pool: block {} freed more often than taken", *it);
    if (--b.ref_count == 0) {
      // Cached blocks wait at the back for a later hit; uncached ones are handed out first.
      b.in_queue = b.has_hash ? free_queue_.insert(free_queue_.end(), *it) : free_queue_.insert(free_queue_.begin(), *it);
    }
  }
  table.blocks.clear();
  table.num_tokens = 0;
}

void BlockPool::free(BlockTable& table, BlockHashes& hashes) {
  free(table);
  hashes.hashes.clear();
}

void BlockPool::reset_prefix_cache() {
  for (int b = 0; b < num_blocks_; ++b)
    if (blocks_[b].ref_count == 0) evict_hash(b);
}

void BlockPool::check_consistency(std::span<const BlockTable* const> tables) const {
  std::vector<int> refs(num_blocks_, 0);
  for (const BlockTable* t : tables)
    for (int32_t b : t->blocks) {
      if (b < 0 || b >= num_blocks_) fail("block pool: table holds block {} outside the pool", b);
      ++refs[b];
    }
  std::vector<int> queued(num_blocks_, 0);
  for (int b : free_queue_) ++queued[b];
  for (int b = 0; b < num_blocks_; ++b) {
    if (blocks_[b].ref_count != refs[b])
      fail("block pool: block {} has {} references but {} tables hold it", b, blocks_[b].ref_count, refs[b]);
    if (queued[b] != (refs[b] == 0 ? 1 : 0))
      fail("block pool: block {} is in the free queue {} times with {} references", b, queued[b], refs[b]);
  }
  for (const auto& [h, b] : by_hash_)
    if (!blocks_[b].has_hash || blocks_[b].hash != h) fail("block pool: hash entry points at block {} without it", b);
  if (windows_) {
    std::vector<int> users(num_blocks_, 0);
    for (const BlockTable* t : tables) for_window_users(*t, [&](int block) { ++users[block]; });
    windows_->check_consistency(users);
  }
}

}  // namespace tq
