#include "kv/kv_cache.h"

#include <new>

#include "errors/error.h"

namespace tq {

namespace {
int checked_block_count(int num_blocks) {
  if (num_blocks <= 0) fail("KV cache needs at least one block (got {})", num_blocks);
  return num_blocks;
}
}  // namespace

BlockAllocator::BlockAllocator(int num_blocks) : num_blocks_(checked_block_count(num_blocks)), in_use_(num_blocks_, 0) {
  free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int BlockAllocator::allocate() {
  if (free_.empty()) return -1;
  const int block = free_.back();
  free_.pop_back();
  in_use_[block] = 1;
  return block;
}

void BlockAllocator::release(int block) {
  if (block < 0 || block >= num_blocks_ || !in_use_[block]) fail("KV block {} released twice or never allocated", block);
  in_use_[block] = 0;
  free_.push_back(block);
}

KvCache::KvCache(const KvCacheShape& shape, int num_blocks)
    : shape_(shape), num_blocks_(checked_block_count(num_blocks)), allocator_(num_blocks) {
  head_stride_ = shape.row_bytes() * shape.block_size;
  block_stride_ = head_stride_ * shape.num_kv_heads;
  layer_bytes_ = block_stride_ * num_blocks;
  const size_t arena = layer_bytes_ * shape.num_layers;
  k_arena_.reset(new (std::nothrow) uint8_t[arena]);
  v_arena_.reset(new (std::nothrow) uint8_t[arena]);
  if (!k_arena_ || !v_arena_) {
    k_arena_.reset();
    v_arena_.reset();
    fail("cannot allocate the KV cache: {} blocks need {:.1f} MiB", num_blocks, 2.0 * arena / (1 << 20));
  }
}

bool KvCache::reserve(BlockTable& table, int num_tokens) {
  const int needed = (num_tokens + shape_.block_size - 1) / shape_.block_size;
  const size_t had = table.blocks.size();
  while (static_cast<int>(table.blocks.size()) < needed) {
    const int block = allocator_.allocate();
    if (block < 0) {
      while (table.blocks.size() > had) {
        allocator_.release(table.blocks.back());
        table.blocks.pop_back();
      }
      return false;
    }
    table.blocks.push_back(block);
  }
  return true;
}

void KvCache::release(BlockTable& table) {
  for (int32_t block : table.blocks) allocator_.release(block);
  table.blocks.clear();
  table.num_tokens = 0;
}

uint8_t* KvCache::row_ptr(uint8_t* arena, int layer, int block, int head, int offset) const {
  return arena + layer * layer_bytes_ + block * block_stride_ + head * head_stride_ + offset * shape_.row_bytes();
}

void KvCache::write(int layer, const BlockTable& table, int position, const float* k, const float* v) {
  const int block = table.blocks.at(position / shape_.block_size);
  const int offset = position % shape_.block_size;
  for (int h = 0; h < shape_.num_kv_heads; ++h) {
    kv_encode_row(shape_.dtype, k + h * shape_.head_dim, shape_.head_dim,
                  row_ptr(k_arena_.get(), layer, block, h, offset));
    kv_encode_row(shape_.dtype, v + h * shape_.head_dim, shape_.head_dim,
                  row_ptr(v_arena_.get(), layer, block, h, offset));
  }
}

PagedRows KvCache::k_pages(int layer) const {
  return PagedRows{k_arena_.get() + layer * layer_bytes_, block_stride_, head_stride_, shape_.row_bytes(),
                   kv_fp_elem(shape_.dtype)};
}

PagedRows KvCache::v_pages(int layer) const {
  return PagedRows{v_arena_.get() + layer * layer_bytes_, block_stride_, head_stride_, shape_.row_bytes(),
                   kv_fp_elem(shape_.dtype)};
}

}  // namespace tq
