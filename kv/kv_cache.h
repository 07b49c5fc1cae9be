// The paged KV cache: one arena for K and one for V, each laid out
//   [layer][block][kv_head][offset][row bytes]
// so one head's rows within a block are contiguous for the attention kernel. A sequence owns
// a BlockTable; token t of it lives in block table[t / block_size] at offset t % block_size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/attention_fp.h"
#include "kv/kv_dtype.h"

namespace tq {

struct KvCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  KvDtype dtype = KvDtype::BF16;

  size_t row_bytes() const { return kv_row_bytes(dtype, head_dim); }
  // K + V bytes of one token over all layers and KV heads.
  size_t bytes_per_token() const { return 2 * static_cast<size_t>(num_layers) * num_kv_heads * row_bytes(); }
  // K + V bytes of one block over all layers.
  size_t bytes_per_block() const { return bytes_per_token() * block_size; }
};

// Free list of block ids. Lowest ids first, so runs are reproducible.
class BlockAllocator {
 public:
  explicit BlockAllocator(int num_blocks);
  int allocate();  // -1 when none is free
  void release(int block);
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_blocks() const { return num_blocks_; }

 private:
  int num_blocks_;
  std::vector<int> free_;  // stack; back() is the next to hand out
  std::vector<uint8_t> in_use_;
};

struct BlockTable {
  std::vector<int32_t> blocks;
  int num_tokens = 0;  // tokens whose K/V are (or are being) stored
};

class KvCache {
 public:
  // Throws tq::Error when the arenas cannot be allocated (message gives the size asked).
  KvCache(const KvCacheShape& shape, int num_blocks);

  const KvCacheShape& shape() const { return shape_; }
  int num_blocks() const { return num_blocks_; }
  BlockAllocator& allocator() { return allocator_; }
  size_t total_bytes() const { return 2 * layer_bytes_ * shape_.num_layers; }

  // Grow `table` so it can hold `num_tokens` tokens. False (table unchanged) when the pool is
  // out of blocks.
  bool reserve(BlockTable& table, int num_tokens);
  void release(BlockTable& table);

  // Store K and V of one token: k, v: [num_kv_heads, head_dim] fp32.
  void write(int layer, const BlockTable& table, int position, const float* k, const float* v);

  // Views the attention kernel reads.
  PagedRows k_pages(int layer) const;
  PagedRows v_pages(int layer) const;

 private:
  uint8_t* row_ptr(uint8_t* arena, int layer, int block, int head, int offset) const;

  KvCacheShape shape_;
  int num_blocks_;
  size_t head_stride_;   // bytes of one head's rows in a block
  size_t block_stride_;  // bytes of one block in one layer
  size_t layer_bytes_;   // bytes of one layer's K (or V) arena
  std::unique_ptr<uint8_t[]> k_arena_;
  std::unique_ptr<uint8_t[]> v_arena_;
  BlockAllocator allocator_;
};

}  // namespace tq
