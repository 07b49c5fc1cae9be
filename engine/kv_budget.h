// Sizing the serving KV cache from memory: a byte budget (--kv-cache-memory, or a fraction of
// the machine's available memory with --memory-utilization) buys whole blocks of the mode; if
// the allocation fails, try half as many blocks, down to what one --max-model-len request
// needs, each failed attempt freeing everything it allocated. Too little memory for even one
// request is a startup error that gives the needed and available sizes and the longest
// context that would fit.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"

namespace tq {

// MemAvailable of /proc/meminfo in bytes (0 when unknown).
size_t available_memory_bytes();

// "2GiB", "512MiB", "1.5G", "1000000" (bytes) → bytes; throws tq::Error naming the flag.
size_t parse_byte_size(const std::string& text, const std::string& flag);

struct KvSizing {
  size_t budget_bytes = 0;
  size_t bytes_per_block = 0;
  size_t fixed_bytes = 0;  // allocated whatever the block count (the window blocks), out of the budget
  int block_size = 16;
  int max_model_len = 0;  // one request of this many tokens must fit
  std::string mode;       // for messages
};

// Blocks one max_model_len request needs.
int min_blocks_for(const KvSizing& s);

// Builds the cache with make(blocks): blocks = budget / bytes_per_block, halved on
// KvAllocationError down to min_blocks_for(s), then writes the whole cache (KvCache::prefault).
// Throws tq::Error when the budget or the memory cannot hold one request. log (optional)
// receives a line per failed attempt.
std::unique_ptr<KvCache> allocate_kv_cache(const KvSizing& s, const std::function<std::unique_ptr<KvCache>(int)>& make,
                                           std::vector<std::string>* log = nullptr);

}  // namespace tq
