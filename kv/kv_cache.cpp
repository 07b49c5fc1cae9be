#include "kv/kv_cache.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "errors/error.h"
#include "memory/huge_pages.h"

namespace tq {

namespace {
std::atomic<int> g_injected_failures{0};
std::atomic<int> g_injected_after{0};
std::atomic<size_t> g_live_arena_bytes{0};
}  // namespace

void KvCache::ArenaFree::operator()(uint8_t* p) const {
  g_live_arena_bytes -= bytes;
  huge_page_free(p, bytes);
}

KvCache::Arena KvCache::allocate_arena(size_t bytes) {
  if (g_injected_failures > 0) {
    if (g_injected_after > 0) {
      --g_injected_after;
    } else {
      --g_injected_failures;
      return Arena(nullptr, ArenaFree{0});
    }
  }
  // Huge pages where the kernel offers them: a decode step reads each sequence's rows block by
  // block, scattered over the arena, and with 4 KiB pages most blocks cost a page walk.
  uint8_t* p = static_cast<uint8_t*>(huge_page_allocate(bytes));
  if (!p) return Arena(nullptr, ArenaFree{0});
  g_live_arena_bytes += bytes;
  return Arena(p, ArenaFree{bytes});
}

void kv_cache_inject_allocation_failures(int count, int after) {
  g_injected_after = after;
  g_injected_failures = count;
}
size_t kv_cache_live_arena_bytes() { return g_live_arena_bytes; }

namespace {
int checked_block_count(int num_blocks) {
  if (num_blocks <= 0) fail("KV cache needs at least one block (got {})", num_blocks);
  return num_blocks;
}
}  // namespace

size_t KvCacheShape::layer_bytes_per_token(int layer) const {
  return static_cast<size_t>(num_kv_heads) *
         (kv_row_bytes(k_dtype_of(layer), head_dim) + kv_row_bytes(v_dtype_of(layer), head_dim));
}

size_t KvCacheShape::bytes_per_token() const {
  size_t total = 0;
  for (int l = 0; l < num_layers; ++l) total += layer_bytes_per_token(l);
  return total;
}

size_t KvCacheShape::window_bytes_per_token() const {
  size_t sides = 0;
  for (int l = 0; l < num_layers; ++l) sides += !kv_dtype_is_fp(k_dtype_of(l)) + !kv_dtype_is_fp(v_dtype_of(l));
  return sides * num_kv_heads * kv_row_bytes(windows.dtype, head_dim);
}

double KvCacheShape::bytes_per_token_at(int ctx) const {
  if (!windows.any() || ctx <= 0) return double(bytes_per_token());
  const int rows = std::min(ctx, windows.full_precision_rows(ctx - 1));
  return double(bytes_per_token()) + double(rows) * window_bytes_per_token() / ctx;
}

double KvCacheShape::bits_per_element_at(int ctx) const {
  return 8.0 * bytes_per_token_at(ctx) / (2.0 * num_layers * num_kv_heads * head_dim);
}

std::string KvCacheShape::mode_name() const {
  if (!preset.empty()) return preset;
  return k_dtype == v_dtype ? std::string(kv_dtype_name(k_dtype))
                            : fmt::format("k={},v={}", kv_dtype_name(k_dtype), kv_dtype_name(v_dtype));
}

namespace {
// "12 tq4h + 18 tq3h": how many layers use each dtype, in first-use order.
std::string layer_counts(const std::vector<KvDtype>& layers) {
  std::vector<std::pair<KvDtype, int>> counts;
  for (KvDtype d : layers) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == d; });
    if (it == counts.end()) {
      counts.emplace_back(d, 1);
    } else {
      ++it->second;
    }
  }
  std::string out;
  for (const auto& [d, n] : counts) out += fmt::format("{}{} {}", out.empty() ? "" : " + ", n, kv_dtype_name(d));
  return out;
}
}  // namespace

std::vector<std::string> KvCacheShape::layer_modes() const {
  std::vector<std::string> out;
  if (k_layers.empty() && v_layers.empty()) return out;
  for (int l = 0; l < num_layers; ++l)
    out.push_back(fmt::format("{}/{}", kv_dtype_name(k_dtype_of(l)), kv_dtype_name(v_dtype_of(l))));
  return out;
}

std::string KvCacheShape::describe() const {
  std::string out = k_dtype == v_dtype ? std::string(kv_dtype_name(k_dtype))
                                       : fmt::format("k={},v={}", kv_dtype_name(k_dtype), kv_dtype_name(v_dtype));
  if (!k_layers.empty() || !v_layers.empty())
    out = fmt::format("k={},v={}", k_layers.empty() ? std::string(kv_dtype_name(k_dtype)) : layer_counts(k_layers),
                      v_layers.empty() ? std::string(kv_dtype_name(v_dtype)) : layer_counts(v_layers));
  if (!preset.empty()) out = fmt::format("{} ({})", preset, out);
  if (protect_layers > 0 && (k_dtype != protect_dtype || v_dtype != protect_dtype))
    out += fmt::format(", first/last {} layers {}", protect_layers, kv_dtype_name(protect_dtype));
  if (windows.any()) out += ", full-precision windows: " + windows.describe();
  return out;
}

KvCache::KvCache(const KvCacheShape& shape, int num_blocks, const KvQuantOptions& options,
                 const OutlierPartition& outliers, const KvAffine& affine, const KvChannelCodings& channels,
                 KvPageHome home)
    : home_(home), shape_(shape), options_(options), num_blocks_(checked_block_count(num_blocks)) {
  if (shape.num_layers <= 0 || shape.num_kv_heads <= 0 || shape.block_size <= 0)
    fail("KV cache shape needs positive layers, KV heads and block size (got {}, {}, {})", shape.num_layers,
         shape.num_kv_heads, shape.block_size);
  for (const auto* layers : {&shape.k_layers, &shape.v_layers})
    if (!layers->empty() && static_cast<int>(layers->size()) != shape.num_layers)
      fail("KV cache: per-layer dtypes for {} layers, the model has {}", layers->size(), shape.num_layers);
  if (!kv_dtype_is_fp(shape.protect_dtype)) fail("protected layers must use f32, bf16 or f16, not {}", kv_dtype_name(shape.protect_dtype));
  auto layer_order = [&](const std::vector<std::vector<std::vector<int>>>& orders, int l, KvDtype dtype) {
    if (!kv_dtype_is_split(dtype) || l >= static_cast<int>(orders.size())) return std::vector<std::vector<int>>{};
    return orders[l];
  };
  auto layer_affine = [&](const std::vector<std::vector<std::vector<float>>>& means, int l, KvDtype dtype) {
    if (kv_dtype_is_fp(dtype) || l >= static_cast<int>(means.size())) return std::vector<std::vector<float>>{};
    return means[l];
  };
  auto layer_channels = [&](const std::vector<ChannelCoding>& codings, int l, KvDtype dtype) {
    if (!kv_dtype_is_channel_bits(dtype) || l >= static_cast<int>(codings.size())) return ChannelCoding{};
    return codings[l];
  };
  const int window_blocks = shape.windows.window_blocks > 0 ? std::min(shape.windows.window_blocks, num_blocks) : num_blocks;
  auto layout = [&](KvDtype dtype, size_t& offset, int blocks) {
    SideLayout s;
    s.offset = offset;
    s.row_bytes = kv_row_bytes(dtype, shape.head_dim);
    s.head_stride = s.row_bytes * shape.block_size;
    s.block_stride = s.head_stride * shape.num_kv_heads;
    offset += s.block_stride * blocks;
    return s;
  };
  for (int l = 0; l < shape.num_layers; ++l) {
    const KvDtype kd = shape.k_dtype_of(l), vd = shape.v_dtype_of(l);
    k_codecs_.emplace_back(kd, shape.head_dim, l, options, layer_order(outliers.k_order, l, kd),
                           layer_affine(affine.k_mean, l, kd), layer_affine(affine.k_scale, l, kd),
                           layer_channels(channels.k, l, kd));
    v_codecs_.emplace_back(vd, shape.head_dim, l, options, layer_order(outliers.v_order, l, vd),
                           layer_affine(affine.v_mean, l, vd), std::vector<std::vector<float>>{},
                           layer_channels(channels.v, l, vd));
    k_layout_.push_back(layout(kd, k_bytes_, num_blocks));
    v_layout_.push_back(layout(vd, v_bytes_, num_blocks));
    if (shape.windows.any()) {
      k_window_layout_.push_back(kv_dtype_is_fp(kd) ? SideLayout{} : layout(shape.windows.dtype, window_bytes_, window_blocks));
      v_window_layout_.push_back(kv_dtype_is_fp(vd) ? SideLayout{} : layout(shape.windows.dtype, window_bytes_, window_blocks));
    }
  }
  if (shape.windows.any()) {
    if (shape.windows.dtype != KvDtype::F16 && shape.windows.dtype != KvDtype::Q8_0)
      fail("KV windows keep rows as f16 or q8_0, not {}", kv_dtype_name(shape.windows.dtype));
    check_kv_dtype(shape.windows.dtype, shape.head_dim, false);
    window_codec_.emplace(shape.windows.dtype, shape.head_dim, 0, options);
    window_store_.emplace(num_blocks, window_blocks);
  }
  if (shape.windows.sink_tokens < 0 || shape.windows.recent_tokens < 0 || shape.windows.coded_last < 0)
    fail("KV windows: sink ({}) and recent ({}) token counts cannot be negative", shape.windows.sink_tokens,
         shape.windows.recent_tokens);
  if (home_ == KvPageHome::Device) return;  // the device holds the rows
  k_arena_ = allocate_arena(k_bytes_);
  v_arena_ = allocate_arena(v_bytes_);
  if (window_bytes_ > 0) window_arena_ = allocate_arena(window_bytes_);
  if (!k_arena_ || !v_arena_ || (window_bytes_ > 0 && !window_arena_)) {
    k_arena_.reset();  // what was allocated goes back at once
    v_arena_.reset();
    window_arena_.reset();
    throw KvAllocationError(fmt::format("cannot allocate the KV cache: {} blocks need {:.1f} MiB", num_blocks,
                                        double(k_bytes_ + v_bytes_ + window_bytes_) / (1 << 20)));
  }
}

void KvCache::require_host_rows(const char* what) const {
  if (home_ == KvPageHome::Device) fail("KvCache::{}: this cache's rows live on the device (--device cuda)", what);
}

void KvCache::prefault() {
  if (home_ == KvPageHome::Device) return;
  std::memset(k_arena_.get(), 0, k_bytes_);
  std::memset(v_arena_.get(), 0, v_bytes_);
  if (window_arena_) std::memset(window_arena_.get(), 0, window_bytes_);
}

void KvCache::write(int layer, const BlockTable& table, int position, const float* k, const float* v) {
  require_host_rows("write");
  const int block = table.blocks.at(position / shape_.block_size);
  const int offset = position % shape_.block_size;
  const KvRowCodec& kc = k_codecs_[layer];
  const KvRowCodec& vc = v_codecs_[layer];
  for (int h = 0; h < shape_.num_kv_heads; ++h) {
    kc.encode(k + h * shape_.head_dim, h, row_ptr(k_arena_.get(), k_layout_[layer], block, h, offset));
    vc.encode(v + h * shape_.head_dim, h, row_ptr(v_arena_.get(), v_layout_[layer], block, h, offset));
  }
  if (!window_arena_ || !window_store_->has_window(block)) return;
  // The window copy: the row encode() codes, before coding, stored as the window dtype.
  const int window_block = window_store_->window_of()[block];
  float storage[512];  // head_dim <= 512 (check_kv_dtype)
  auto write_window = [&](const KvRowCodec& codec, const SideLayout& s, const float* x) {
    if (s.row_bytes == 0) return;  // an FP side: its pages are its window
    for (int h = 0; h < shape_.num_kv_heads; ++h) {
      codec.exact_storage_row(x + h * shape_.head_dim, h, storage);
      window_codec_->encode(storage, 0, row_ptr(window_arena_.get(), s, window_block, h, offset));
    }
  };
  write_window(kc, k_window_layout_[layer], k);
  write_window(vc, v_window_layout_[layer], v);
}

void KvCache::read(int layer, const BlockTable& table, int position, float* k, float* v) const {
  require_host_rows("read");
  const int block = table.blocks.at(position / shape_.block_size);
  const int offset = position % shape_.block_size;
  for (int h = 0; h < shape_.num_kv_heads; ++h) {
    k_codecs_[layer].decode(row_ptr(k_arena_.get(), k_layout_[layer], block, h, offset), h, k + h * shape_.head_dim);
    v_codecs_[layer].decode(row_ptr(v_arena_.get(), v_layout_[layer], block, h, offset), h, v + h * shape_.head_dim);
  }
}

bool KvCache::layer_is_fp(int layer) const {
  return kv_dtype_is_fp(shape_.k_dtype_of(layer)) && kv_dtype_is_fp(shape_.v_dtype_of(layer));
}

PagedRows KvCache::k_pages(int layer) const {
  require_host_rows("k_pages");
  const SideLayout& s = k_layout_[layer];
  return PagedRows{k_arena_.get() + s.offset, s.block_stride, s.head_stride, s.row_bytes,
                   k_codecs_[layer].row_format()};
}

PagedRows KvCache::v_pages(int layer) const {
  require_host_rows("v_pages");
  const SideLayout& s = v_layout_[layer];
  return PagedRows{v_arena_.get() + s.offset, s.block_stride, s.head_stride, s.row_bytes,
                   v_codecs_[layer].row_format()};
}

}  // namespace tq

namespace tq {

PagedRows KvCache::window_k_pages(int layer) const {
  require_host_rows("window_k_pages");
  if (!shape_.windows.any()) fail("KV cache: layer {} has no window rows (windows are off)", layer);
  const SideLayout& s = k_window_layout_[layer];
  if (s.row_bytes == 0) return k_pages(layer);
  return PagedRows{window_arena_.get() + s.offset, s.block_stride, s.head_stride, s.row_bytes,
                   window_codec_->row_format(), window_store_->window_of()};
}

PagedRows KvCache::window_v_pages(int layer) const {
  require_host_rows("window_v_pages");
  if (!shape_.windows.any()) fail("KV cache: layer {} has no window rows (windows are off)", layer);
  const SideLayout& s = v_window_layout_[layer];
  if (s.row_bytes == 0) return v_pages(layer);
  return PagedRows{window_arena_.get() + s.offset, s.block_stride, s.head_stride, s.row_bytes,
                   window_codec_->row_format(), window_store_->window_of()};
}

}  // namespace tq

