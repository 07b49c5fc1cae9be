// The paged KV cache on the GPU: writing a step's full-precision K/V rows into their blocks, and
// causal GQA attention of each token over its sequence's rows, full-precision or 4-bit TurboQuant. The pages have the CPU cache's
// layout (kv/kv_cache.h), one layer's side at a time: row (block b, kv head g, offset o) at
// element ((b * n_kv_heads + g) * block_size + o) * head_dim.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device_array.h"
#include "kernels/cuda/transformer_ops.h"

namespace tq::cuda {

// Where each token of a step reads and writes: token t is at position positions[t] of the sequence
// whose block table starts at tables + table_begin[t] (device memory, all of it).
struct TokenSlots {
  int n = 0;
  const int32_t* positions = nullptr;    // [n]
  const int32_t* table_begin = nullptr;  // [n]
  const int32_t* tables = nullptr;       // concatenated block tables
};

struct KvPageShape {
  int n_kv_heads = 0;
  int head_dim = 0;  // at most kMaxHeadDim
  int block_size = 0;
  Element element = Element::F16;  // F32 or F16
};

constexpr int kMaxHeadDim = 256;

// k, v: [n, n_kv_heads, head_dim] fp32 → the pages of one layer (rounded to shape.element).
void store_kv_rows(const KvPageShape& shape, const TokenSlots& slots, const float* k, const float* v, void* k_pages,
                   void* v_pages, cudaStream_t stream);

// Split context (flash-decoding): each token's context is attended in parts of `part_rows`
// positions, one thread block per (token, KV head, part) for all of that head's query heads, and
// the parts are combined afterwards. The parts depend on the position only, so a token's result
// is the same whatever else is in the batch. The parts' partial results live here.
struct AttentionScratch {
  DeviceArray<float> acc;  // [tokens, max_parts, n_q_heads, head_dim] unnormalized sums
  DeviceArray<float> max;  // [tokens, max_parts, n_q_heads] highest score of the part
  DeviceArray<float> sum;  // [tokens, max_parts, n_q_heads] softmax denominators at that max
};

constexpr int kAttentionPartRows = 256;
constexpr int kMaxQueriesPerKvHead = 8;

// out[t, h] = softmax(q[t, h] · K[0 .. positions[t]]ᵀ · scale) · V for every token t and query
// head h (n_q_heads a multiple of n_kv_heads, at most kMaxQueriesPerKvHead per KV head). q, out:
// [n, n_q_heads, head_dim] fp32; max_ctx: the largest positions[t] + 1 (sizes the scratch).
// Scores, softmax and sums in fp32, in an order fixed by the position.
void paged_attention(const KvPageShape& shape, const TokenSlots& slots, int n_q_heads, int max_ctx, const float* q,
                     const void* k_pages, const void* v_pages, float scale, float* out, AttentionScratch& scratch,
                     cudaStream_t stream, int part_rows = kAttentionPartRows);

// 4-bit TurboQuant pages (kernels/tq_packing.h's rows: head_dim / 2 bytes of codes, then an fp32
// scale, or an fp16 one for the tq4h rows of the tq4 preset), in the CPU cache's layout: row (block
// b, kv head g, offset o) at byte ((b * n_kv_heads + g) * block_size + o) * tq4_row_bytes.
struct Tq4PageShape {
  int n_kv_heads = 0;
  int head_dim = 0;  // a multiple of 4, at most kMaxHeadDim
  int block_size = 0;
  bool f16_scale = false;
};
int tq4_row_bytes(const Tq4PageShape& shape);

// paged_attention over 4-bit TurboQuant K and V, in their storage space: q_store is q already in
// K's storage space (rotated), out_store comes out in V's (the caller rotates it back), as the CPU
// kernels do (kernels/paged_attention.h). Rows are decoded as scale * levels[idx], fp32.
// k_levels, v_levels: [16] device memory.
void tq4_paged_attention(const Tq4PageShape& shape, const TokenSlots& slots, int n_q_heads, int max_ctx,
                         const float* q_store, const uint8_t* k_pages, const float* k_levels, const uint8_t* v_pages,
                         const float* v_levels, float scale, float* out_store, AttentionScratch& scratch,
                         cudaStream_t stream, int part_rows = kAttentionPartRows);

}  // namespace tq::cuda
