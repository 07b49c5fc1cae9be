// Causal GQA attention for one query token over full-precision paged K/V rows.
// Rows live in fixed-size blocks; the sequence's block table maps token t to
// block_table[t / block_size], offset t % block_size. Softmax is online (running max and sum
// per query head), fp32 throughout; each K/V row is read once for all query heads of its group.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tq {

enum class FpElem { F32, BF16, F16 };

// One layer's K (or V) pages: row (block b, kv head g, offset o) starts at
// base + b * block_stride + g * head_stride + o * row_stride.
struct PagedRows {
  const uint8_t* base = nullptr;
  size_t block_stride = 0;
  size_t head_stride = 0;
  size_t row_stride = 0;
  FpElem elem = FpElem::F32;
};

struct FpAttentionArgs {
  const float* q = nullptr;  // [n_q_heads, head_dim], RoPE applied
  int n_q_heads = 0;
  int n_kv_heads = 0;  // n_q_heads % n_kv_heads == 0
  int head_dim = 0;
  const int32_t* block_table = nullptr;  // [ceil(n_ctx / block_size)]
  int block_size = 0;
  int n_ctx = 0;  // attend to positions [0, n_ctx)
  PagedRows k, v;
  float scale = 1.0f;  // 1/sqrt(head_dim)
  float* out = nullptr;  // [n_q_heads, head_dim]
  int kv_head_begin = 0;  // compute KV heads [kv_head_begin, kv_head_end) only, as in
  int kv_head_end = -1;   // CodedAttentionArgs (-1: all)
};

void paged_attention_fp(const FpAttentionArgs& args);

// Plain reference: softmax(q·K/√d)·V over contiguous fp32 rows, for tests.
// q: [n_q_heads, d]; k, v: [n_ctx, n_kv_heads, d]; out: [n_q_heads, d].
void attention_reference(const float* q, const float* k, const float* v, int n_q_heads, int n_kv_heads, int head_dim,
                         int n_ctx, float scale, float* out);

}  // namespace tq
