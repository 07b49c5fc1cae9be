// The paged KV cache: one arena for K and one for V, each laid out
//   [layer][block][kv_head][offset][row bytes]
// so one head's rows within a block are contiguous for the attention kernel. Row bytes follow
// each layer's K or V dtype (quantized rows live in the same block pool; protected layers keep
// full precision), so a block id means the same token slots in every layer. A sequence owns
// a BlockTable; token t of it lives in block table[t / block_size] at offset t % block_size.
// The cache is storage only: which blocks are free is kv/block_pool.h's business, its one allocator.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "errors/error.h"
#include "kernels/paged_attention.h"
#include "kv/kv_dtype.h"
#include "kv/kv_row_codec.h"
#include "kv/kv_window_store.h"
#include "kv/kv_windows.h"

namespace tq {

struct KvCacheShape {
  int num_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  KvDtype k_dtype = KvDtype::F16;
  KvDtype v_dtype = KvDtype::F16;
  // The first and last `protect_layers` layers store K and V as `protect_dtype` (full precision).
  int protect_layers = 0;
  KvDtype protect_dtype = KvDtype::F16;
  // Per-layer dtypes (`--kv-cache-dtype auto`, eval/kv_auto.h): when not empty, layer l stores K
  // as k_layers[l] and V as v_layers[l] (protected layers still as protect_dtype).
  std::vector<KvDtype> k_layers, v_layers;
  // The preset the dtypes came from (kv/kv_presets.h, or "auto:<budget>"), or empty; named first
  // by describe().
  std::string preset;
  // Full-precision windows of the quantized layer sides (kv/kv_windows.h). While windows are on,
  // each quantized side also keeps a storage-space copy (windows.dtype) of the rows of the data
  // blocks that have a window block (kv/kv_window_store.h).
  KvWindows windows;

  bool is_protected(int layer) const { return layer < protect_layers || layer >= num_layers - protect_layers; }
  KvDtype k_dtype_of(int layer) const {
    return is_protected(layer) ? protect_dtype : k_layers.empty() ? k_dtype : k_layers.at(layer);
  }
  KvDtype v_dtype_of(int layer) const {
    return is_protected(layer) ? protect_dtype : v_layers.empty() ? v_dtype : v_layers.at(layer);
  }
  // K + V bytes of one token of one layer, over its KV heads.
  size_t layer_bytes_per_token(int layer) const;
  // K + V bytes of one token over all layers and KV heads (the rows of a data block).
  size_t bytes_per_token() const;
  // Bytes per token of one sequence of `ctx` tokens with its windows: the rows plus the window
  // copies the last query reads, spread over the ctx tokens. bytes_per_token() without windows.
  double bytes_per_token_at(int ctx) const;
  // 8 * bytes_per_token_at(ctx) per element of K and V.
  double bits_per_element_at(int ctx) const;
  // Window-dtype bytes of one token's rows over the quantized layer sides.
  size_t window_bytes_per_token() const;
  // Bytes of one window block (0 without windows).
  size_t window_block_bytes() const { return windows.any() ? window_bytes_per_token() * block_size : 0; }
  // K + V bytes of one data block over all layers.
  size_t bytes_per_block() const { return bytes_per_token() * block_size; }
  // "tq4" or "k=tq4,v=tq3" ("tq4 (tq4p)" for a preset; per-layer dtypes as counts, "auto:0.01
  // (k=12 tq4h + 18 tq3h,v=30 tq3h)"), plus ", first/last N layers f16" when protected and the
  // windows when on.
  std::string describe() const;
  // The mode as a user names it: the preset, else the dtypes ("f16", "k=tq4,v=q8_0").
  std::string mode_name() const;
  // With per-layer dtypes, "k/v" of every layer ("tq4h/tq3h"); else empty.
  std::vector<std::string> layer_modes() const;
};

struct BlockTable {
  std::vector<int32_t> blocks;
  int num_tokens = 0;  // tokens whose K/V are (or are being) stored
  // Windows (kv/block_pool.h): blocks [sink blocks, first_window_block) no longer hold a window user.
  int first_window_block = 0;
};

// Thrown when the cache's memory cannot be allocated (nothing stays allocated).
class KvAllocationError : public Error {
 public:
  using Error::Error;
};

// Tests: after `after` more successful arena allocations, the next `count` fail as if memory
// were exhausted.
void kv_cache_inject_allocation_failures(int count, int after = 0);
// Bytes of KV arenas currently allocated, over all caches (leak checks).
size_t kv_cache_live_arena_bytes();

// Where a cache's rows live: in this process's memory (the CPU forward writes and reads them), or
// on a GPU (model/device_forward.h), whose pages mirror this cache's blocks while the block pool
// and the block tables stay here; such a cache has the same shape, sizes and codecs but no host
// arenas, and every row accessor below fails.
enum class KvPageHome { Host, Device };

class KvCache {
 public:
  // Throws tq::Error when the arenas cannot be allocated (message gives the size asked) or a
  // dtype cannot store this head_dim. `outliers` gives the split dtypes' channel orders.
  KvCache(const KvCacheShape& shape, int num_blocks, const KvQuantOptions& options = {},
          const OutlierPartition& outliers = {}, const KvAffine& affine = {}, const KvChannelCodings& channels = {},
          KvPageHome home = KvPageHome::Host);

  KvPageHome home() const { return home_; }

  const KvCacheShape& shape() const { return shape_; }
  const KvQuantOptions& options() const { return options_; }
  int num_blocks() const { return num_blocks_; }
  size_t total_bytes() const { return k_bytes_ + v_bytes_ + window_bytes_; }
  // Writes every page of the arenas (zeros) so the whole cache is resident now (nothing for a
  // cache whose rows live on a device). The arenas come
  // from the allocator untouched, so without this the process grows page by page as blocks are
  // first used under load (and an over-committed budget fails late, by the OOM killer, instead
  // of at startup). The server calls it once after sizing the cache (engine/kv_budget.h).
  void prefault();

  // Window blocks (null without windows): which data blocks have one.
  KvWindowStore* window_store() { return window_store_ ? &*window_store_ : nullptr; }
  const KvWindowStore* window_store() const { return window_store_ ? &*window_store_ : nullptr; }
  size_t window_arena_bytes() const { return window_bytes_; }

  // Store K and V of one token: k, v: [num_kv_heads, head_dim] fp32.
  void write(int layer, const BlockTable& table, int position, const float* k, const float* v);

  // Read back the stored K and V of one token (decoded, in model space): k, v [num_kv_heads, head_dim].
  void read(int layer, const BlockTable& table, int position, float* k, float* v) const;

  // True when layer's K and V are both f32/bf16/f16 (the exact attention kernel reads them).
  bool layer_is_fp(int layer) const;
  // Views the paged attention kernels read (any layer, rows as stored).
  PagedRows k_pages(int layer) const;
  PagedRows v_pages(int layer) const;
  // The full-precision window rows of a layer (windows.dtype in storage space, through the window
  // store's block map); an FP side's own pages. Only while shape().windows.any().
  PagedRows window_k_pages(int layer) const;
  PagedRows window_v_pages(int layer) const;
  const KvRowCodec& k_codec(int layer) const { return k_codecs_[layer]; }
  const KvRowCodec& v_codec(int layer) const { return v_codecs_[layer]; }

 private:
  // Fails naming `what` when the rows live on a device.
  void require_host_rows(const char* what) const;
  // Where one side (K or V) of one layer lives in its arena.
  struct SideLayout {
    size_t offset = 0;        // of the layer in the arena
    size_t row_bytes = 0;
    size_t head_stride = 0;   // bytes of one head's rows in a block
    size_t block_stride = 0;  // bytes of one block of this layer
  };
  static uint8_t* row_ptr(uint8_t* arena, const SideLayout& s, int block, int head, int offset) {
    return arena + s.offset + block * s.block_stride + head * s.head_stride + offset * s.row_bytes;
  }

  KvPageHome home_ = KvPageHome::Host;
  KvCacheShape shape_;
  KvQuantOptions options_;
  int num_blocks_;
  std::vector<SideLayout> k_layout_, v_layout_;  // [layer]
  std::vector<SideLayout> k_window_layout_, v_window_layout_;  // [layer], quantized sides, windows on
  std::vector<KvRowCodec> k_codecs_, v_codecs_;  // [layer]
  std::optional<KvRowCodec> window_codec_;        // codes window rows (windows on)
  std::optional<KvWindowStore> window_store_;     // windows on
  size_t k_bytes_ = 0, v_bytes_ = 0, window_bytes_ = 0;
  struct ArenaFree {
    size_t bytes;
    void operator()(uint8_t* p) const;
  };
  using Arena = std::unique_ptr<uint8_t[], ArenaFree>;
  static Arena allocate_arena(size_t bytes);  // null when it fails
  Arena k_arena_;
  Arena v_arena_;
  Arena window_arena_;  // fp16 rows of quantized sides; empty without windows
};

}  // namespace tq
