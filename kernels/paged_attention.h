// Causal GQA attention for one query token over paged K/V rows in any stored format
// (kernels/coded_row.h: f32 / bf16 / f16 for the FP cache, q8_0, q4_0, TurboQuant ...), computed
// in each side's *storage space*. Rows live in fixed-size blocks; the sequence's block table maps
// position t to block block_table[t / block_size], offset t % block_size.
//
// For a rotated format (TurboQuant, q4_0h) a K row is stored as k' = R k (coded) and, since R is
// orthogonal, q . k = (R q) . (R k); a V row is stored as v' = R v and
//   sum_i p_i v_i = R^T (sum_i p_i v'_i).
// So the caller passes q already in K's storage space (q' = R q, once per head), the kernel scores
// and accumulates decoded rows as they are stored, and the caller maps the output back from V's
// storage space once per head. For TurboQuant a decoded row is scale * levels[idx], straight from
// the packed bytes: no row is ever un-rotated (DESIGN.md section 5).
//
// Online softmax (running max and sum per query head, fp32); each K/V row is decoded once per KV
// head group for all of that group's query heads.
//
// The kernels, by what they promise:
//   paged_attention_exact_scalar  the plain loop over positions: the reference arithmetic.
//   paged_attention_exact         the plain loop's result bit for bit, with SIMD where it reorders
//                                 nothing (the FP cache runs it with --fp-attention exact).
//   paged_attention_fast          the AVX-512 kernel where the CPU and head_dim allow, else the
//                                 AVX2 one, else the plain loop: tiles of positions, FMA and a
//                                 polynomial exp, so its last bits differ (tests hold it within 1e-5
//                                 relative of a double-precision reference); every cache runs it
//                                 by default. Which kernel runs depends on the CPU only, never on
//                                 the batch, the threads or the part of the context.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/coded_row.h"

namespace tq {

// One layer's K (or V) pages: row (block b, kv head g, offset o) starts at
// base + b * block_stride + g * head_stride + o * row_stride and is stored as `format`.
struct PagedRows {
  const uint8_t* base = nullptr;
  size_t block_stride = 0;
  size_t head_stride = 0;
  size_t row_stride = 0;
  CodedRowFormat format;
  // Optional: the rows of data block b are in block block_map[b] of these pages (window copies,
  // kv/kv_window_store.h). Null: in block b.
  const int32_t* block_map = nullptr;
};

struct PagedAttentionArgs {
  const float* q = nullptr;  // [n_q_heads, head_dim], in K's storage space
  int n_q_heads = 0;
  int n_kv_heads = 0;  // n_q_heads % n_kv_heads == 0
  int head_dim = 0;    // <= 512; equal to k.format.dim and v.format.dim
  const int32_t* block_table = nullptr;  // [ceil(n_ctx / block_size)]
  int block_size = 0;
  int n_ctx = 0;  // attend to positions [0, n_ctx); 0 gives zero outputs
  PagedRows k, v;
  float scale = 1.0f;    // 1/sqrt(head_dim)
  float* out = nullptr;  // [n_q_heads, head_dim], in V's storage space
  // Optional: positions [exact_from, n_ctx) (a prefill chunk's own tokens) are read from these
  // unquantized storage-space rows instead of the pages. exact_from < 0: none.
  int exact_from = -1;
  const float* exact_k = nullptr;  // [n_ctx - exact_from, n_kv_heads, head_dim]
  const float* exact_v = nullptr;  // [n_ctx - exact_from, n_kv_heads, head_dim]
  // Optional full-precision windows (kv/kv_windows.h): with `windows` set, only positions
  // [coded_begin, coded_end) are read from the coded pages `k` / `v`; every other position is read
  // from `window_k` / `window_v` (storage-space rows, usually through their block_map), which the
  // caller guarantees hold them. Exact chunk rows, when given, come first.
  bool windows = false;
  PagedRows window_k, window_v;
  int coded_begin = 0, coded_end = 0;
  // Only KV heads [kv_head_begin, kv_head_end) (and their query heads) are computed; the rest of
  // `out` is left alone. kv_head_end < 0: up to n_kv_heads. Each head's arithmetic is the same
  // whatever the range, so callers may split heads across threads without changing a result.
  int kv_head_begin = 0;
  int kv_head_end = -1;
  // Split context (flash-decoding): only positions [ctx_begin, n_ctx) are attended. With
  // `partial_max` set, the kernel leaves the softmax unnormalized so that parts can be combined
  // (combine_attention_parts): out[h] = sum_i exp(s_i - partial_max[h]) v_i and
  // partial_sum[h] = sum_i exp(s_i - partial_max[h]), where partial_max[h] is the part's
  // highest score. paged_attention_exact takes neither.
  int ctx_begin = 0;
  float* partial_max = nullptr;  // [n_q_heads] (entries of the KV head range written)
  float* partial_sum = nullptr;  // [n_q_heads]
  // Optional: score 2- to 4-bit TurboQuant key rows in integer arithmetic (kernels/tq_key_scores.h:
  // each query head and the codebook in int8, exact integer dot products). Honoured by the AVX-512
  // kernel on a CPU with VNNI, for the tiles of 16 positions a query reads wholly from the coded
  // pages `k` (a tile with window or exact rows is scored in fp32); which tiles those are depends
  // on the query's own arguments (position, windows, ctx_begin; exact_from with exact chunk rows,
  // a mode that depends on chunking anyway), so a result never depends on the batch.
  bool int8_key_scores = false;
  // Optional: sum 2- to 4-bit TurboQuant value rows in integer arithmetic (kernels/tq_value_sums.h: each
  // head's weights of a tile in bytes, the codebook in int8, exact integer sums). Honoured by the
  // AVX-512 kernel on a CPU with VNNI and VBMI for the same tiles as int8_key_scores (and with the
  // same independence from the batch); a tile whose weights cannot be rounded to bytes is summed
  // in fp32.
  bool int8_value_sums = false;
};

// Combines n_parts unnormalized parts of the same query heads (each from a kernel call with
// partial_max/partial_sum, over disjoint position ranges) into the attention output:
// out[h] = sum_p exp(max_p[h] - M) out_p[h] / sum_p exp(max_p[h] - M) sum_p[h], M = max_p max_p[h].
// Part p's heads are part_out + p * out_stride: [n_heads, head_dim], and its statistics
// part_max / part_sum + p * stat_stride: [n_heads]; out: [n_heads, head_dim].
void combine_attention_parts(int n_parts, const float* part_out, size_t out_stride, const float* part_max,
                             const float* part_sum, size_t stat_stride, int n_heads, int head_dim, float* out);
// The reference: one element at a time, each part's product and sum rounded apart (no fused
// multiply-add), parts in order.
void combine_attention_parts_scalar(int n_parts, const float* part_out, size_t out_stride, const float* part_max,
                                    const float* part_sum, size_t stat_stride, int n_heads, int head_dim, float* out);
// The same, bit for bit, 16 elements at a time (both in kernels/attention_parts.cpp), where
// combine_attention_parts_avx512_available(head_dim) (AVX-512F, head_dim % 16 == 0). A decode step
// at 16k context combines 64 parts per head, 8 % of its attention time with the scalar loop.
bool combine_attention_parts_avx512_available(int head_dim);
void combine_attention_parts_avx512(int n_parts, const float* part_out, size_t out_stride, const float* part_max,
                                    const float* part_sum, size_t stat_stride, int n_heads, int head_dim, float* out);

// Fails (tq::Error, naming the problem) unless the arguments are usable. Every kernel below checks
// them too; a caller that runs kernels inside an OpenMP region checks before it, because an
// exception thrown inside the region would terminate the program.
void check_paged_attention_args(const PagedAttentionArgs& args);

// The plain loop with the scalar row decoders.
void paged_attention_exact_scalar(const PagedAttentionArgs& args);
// paged_attention_exact_scalar's result bit for bit: the same operations in the same order, 8
// positions' dot products in 8 lanes, the SIMD row decoders (bit-identical to the scalar ones),
// no fused multiply-add. The whole context in one part (no ctx_begin, no partial_max).
void paged_attention_exact(const PagedAttentionArgs& args);
// Several query tokens of one sequence (a prefill chunk's): queries[j] as paged_attention_fast
// computes it, bit for bit, for every j. All share the pages, block table, heads, KV head range and
// ctx_begin (check_same_sequence), each with its own q, out, n_ctx, windows' coded range, exact
// rows and partial outputs. The AVX-512 kernel decodes each tile of rows once for the queries that
// read it alike; other kernels compute the queries one by one.
void paged_attention_fast_queries(const PagedAttentionArgs* queries, int n_queries);
void paged_attention_fast_avx512_queries(const PagedAttentionArgs* queries, int n_queries);
// Fails unless a and b may be computed together (paged_attention_fast_queries).
void check_same_sequence(const PagedAttentionArgs& a, const PagedAttentionArgs& b);

// paged_attention_fast_avx512 where paged_attention_fast_avx512_available, else
// paged_attention_fast_avx2 where paged_attention_fast_avx2_available, else
// paged_attention_exact_scalar.
void paged_attention_fast(const PagedAttentionArgs& args);
// The AVX2 (+FMA, F16C) kernel: usable iff paged_attention_fast_avx2_available(args); fails
// otherwise.
bool paged_attention_fast_avx2_available(const PagedAttentionArgs& args);
void paged_attention_fast_avx2(const PagedAttentionArgs& args);
// The AVX-512 kernel (kernels/paged_attention_avx512.cpp; tiles of 16 positions): usable iff
// paged_attention_fast_avx512_available(args) (AVX-512F+FMA+F16C, head_dim % 16 == 0); fails
// otherwise.
bool paged_attention_fast_avx512_available(const PagedAttentionArgs& args);
void paged_attention_fast_avx512(const PagedAttentionArgs& args);

// Plain reference for tests: softmax(q·K/√d)·V over contiguous fp32 rows, in double precision.
// q: [n_q_heads, d]; k, v: [n_ctx, n_kv_heads, d]; out: [n_q_heads, d].
void attention_reference(const float* q, const float* k, const float* v, int n_q_heads, int n_kv_heads, int head_dim,
                         int n_ctx, float scale, float* out);

}  // namespace tq
