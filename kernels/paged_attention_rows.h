// What the paged-attention kernels share (kernels/paged_attention.cpp and its AVX-512 sibling):
// where a position's K/V row lives, loading rows into fp32 tiles, and the online softmax state.
// Internal to kernels/; compiled without any target attribute so that every translation unit
// gets the same code for these inline functions.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/coded_row.h"
#include "kernels/paged_attention.h"

namespace tq::attention_detail {

constexpr int kMaxHeadDim = 512;
constexpr int kMaxGroup = 64;  // query heads per KV head

inline int kv_head_end(const PagedAttentionArgs& a) { return a.kv_head_end < 0 ? a.n_kv_heads : a.kv_head_end; }

// Whether position t is read from the full-precision window pages.
inline bool in_window(const PagedAttentionArgs& a, int t) {
  return a.windows && (t < a.coded_begin || t >= a.coded_end);
}

// Row `offset` of KV head g in data block `block` of these pages (through their block map).
inline const uint8_t* row_ptr(const PagedRows& rows, int32_t block, int g, int offset) {
  const int32_t at = rows.block_map ? rows.block_map[block] : block;
  return rows.base + size_t(at) * rows.block_stride + size_t(g) * rows.head_stride + size_t(offset) * rows.row_stride;
}

// Rows t0 .. t0 + n - 1 of KV head g of these pages into out[n]: one division per call and one
// block-table lookup per block (a division per row was a measurable part of the kernel's time).
inline void row_ptrs(const PagedAttentionArgs& a, const PagedRows& rows, int t0, int n, int g, const uint8_t** out) {
  int block = t0 / a.block_size, offset = t0 % a.block_size;
  for (int i = 0; i < n; ++block, offset = 0) {
    const uint8_t* first = row_ptr(rows, a.block_table[block], g, offset);
    const int run = std::min(n - i, a.block_size - offset);
    for (int e = 0; e < run; ++e) out[i + e] = first + size_t(e) * rows.row_stride;
    i += run;
  }
}

using RowDecoder = void (*)(const CodedRowFormat&, const uint8_t*, float*);

// Row t of KV head g of one side (K: key = true) into out[head_dim]: the exact row when the
// caller passed one for t, else the page row decoded.
inline void load_row(const PagedAttentionArgs& a, bool key, int t, int g, RowDecoder decode, float* out) {
  if (a.exact_from >= 0 && t >= a.exact_from) {
    const float* exact = (key ? a.exact_k : a.exact_v) + (size_t(t - a.exact_from) * a.n_kv_heads + g) * a.head_dim;
    std::copy(exact, exact + a.head_dim, out);
    return;
  }
  const PagedRows& rows = in_window(a, t) ? (key ? a.window_k : a.window_v) : (key ? a.k : a.v);
  decode(rows.format, row_ptr(rows, a.block_table[t / a.block_size], g, t % a.block_size), out);
}

// Rows t0 .. t0 + n - 1 of KV head g of one side into rows + i * stride: a run of rows inside one
// block and one source (pages or window) is decoded with one call; exact rows, runs across
// blocks and runs across a window's edge go row by row.
using RowsDecoder = void (*)(const CodedRowFormat&, const uint8_t*, size_t, int, float*, size_t);
inline void load_tile(const PagedAttentionArgs& a, bool key, int t0, int n, int g, float* rows, size_t stride,
                      RowsDecoder decode_rows = decode_coded_rows_avx2) {
  const int offset = t0 % a.block_size;
  const bool exact = a.exact_from >= 0 && t0 + n > a.exact_from;
  const bool window = in_window(a, t0);
  const bool one_source = !a.windows || (window ? (t0 + n <= a.coded_begin || t0 >= a.coded_end)
                                                  : t0 + n <= a.coded_end);
  if (!exact && one_source && offset + n <= a.block_size) {
    const PagedRows& pages = window ? (key ? a.window_k : a.window_v) : (key ? a.k : a.v);
    decode_rows(pages.format, row_ptr(pages, a.block_table[t0 / a.block_size], g, offset), pages.row_stride, n, rows,
                stride);
    return;
  }
  for (int i = 0; i < n; ++i) load_row(a, key, t0 + i, g, decode_coded_row_avx2, rows + i * stride);
}

// Asks the CPU to start loading the page bytes of rows t0 .. t0 + n - 1 (clipped to the context)
// of KV head g of one side: a kernel calls it a tile ahead, so that the rows of the next block,
// which the block table may put anywhere, are not each a cache miss when decoded. Exact chunk rows
// are skipped (they were just written).
// GCC deletes a loop whose body is only __builtin_prefetch (it has no side effects), so the x86
// instruction is written out.
inline void prefetch_line(const uint8_t* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

inline void prefetch_tile(const PagedAttentionArgs& a, bool key, int t0, int n, int g) {
  const int end = std::min(t0 + n, a.exact_from >= 0 ? a.exact_from : a.n_ctx);
  for (int t = t0; t < end;) {
    const PagedRows& pages = in_window(a, t) ? (key ? a.window_k : a.window_v) : (key ? a.k : a.v);
    const int offset = t % a.block_size, run = std::min(end - t, a.block_size - offset);
    const uint8_t* first = row_ptr(pages, a.block_table[t / a.block_size], g, offset);
    const size_t bytes = size_t(run) * pages.row_stride;
    for (size_t at = 0; at < bytes; at += 64) prefetch_line(first + at);
    prefetch_line(first + bytes - 1);
    t += run;
  }
}

// The online softmax of one query head: the highest score so far and the sum of exp(score - max)
// over the positions so far. Every kernel keeps one per head and raises its maximum only through
// raise_max (the AVX-512 kernel keeps the sum in 16 lanes and sets `sum` once, at the end).
struct OnlineSoftmax {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
};

// What a rise of the maximum does to what has been accumulated (the sum and the head's weighted
// sum of V rows): when `needed`, both are scaled by `correction` = exp(old max - new max).
struct Rescale {
  bool needed;
  float correction;  // 1 when not needed
};

// Raises the maximum to `score` if that is higher. Scaling the running sum is left to the caller:
// the plain loop rounds sum * correction before adding a weight; the AVX2 kernel adds a tile's
// weights in the same expression (and may fuse it into one multiply-add); the AVX-512 one scales
// its 16 lane sums and adds the tile's weights lane by lane (its file is compiled with
// -ffp-contract=off, so it never fuses).
inline Rescale raise_max(OnlineSoftmax& st, float score) {
  const float new_max = std::max(st.max, score);
  const bool needed = new_max > st.max;
  const Rescale r{needed, needed ? std::exp(st.max - new_max) : 1.0f};
  st.max = new_max;
  return r;
}

// One position with this score, as the plain loop takes it: returns its weight exp(score - max)
// (1 for a new maximum) and, in *rescale, what the caller does to its accumulator before adding
// weight times the position's V row.
inline float add_position(OnlineSoftmax& st, float score, Rescale* rescale) {
  *rescale = raise_max(st, score);
  const float weight = rescale->needed ? 1.0f : std::exp(score - st.max);
  if (rescale->needed) st.sum *= rescale->correction;
  st.sum += weight;
  return weight;
}

// Query head `head`'s result from its state and accumulator acc[head_dim]: normalized into out,
// or, for combine_attention_parts, left unnormalized with the state in partial_max / partial_sum.
inline void write_head(const PagedAttentionArgs& a, int head, const OnlineSoftmax& st, const float* acc) {
  float* out = a.out + size_t(head) * a.head_dim;
  if (a.partial_max) {
    a.partial_max[head] = st.max;
    a.partial_sum[head] = st.sum;
    std::copy(acc, acc + a.head_dim, out);
    return;
  }
  const float inv = st.sum > 0 ? 1.0f / st.sum : 0.0f;
  for (int j = 0; j < a.head_dim; ++j) out[j] = acc[j] * inv;
}

}  // namespace tq::attention_detail
