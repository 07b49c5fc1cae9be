#include "model/layer_blocks.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "kernels/activation.h"
#include "kernels/norm.h"
#include "kernels/paged_attention.h"
#include "kernels/rope.h"
#include "errors/error.h"

namespace tq {

void norm_input(LayerContext& c, const std::vector<float>& weight) {
  rms_norm(c.buf.x.data(), weight.data(), c.batch.size(), c.config.hidden_size, c.config.rms_norm_eps, c.buf.h.data());
}

void project_qkv(LayerContext& c) {
  const int T = c.batch.size();
  apply_linears({{c.w.wq, c.buf.q.data()}, {c.w.wk, c.buf.k.data()}, {c.w.wv, c.buf.v.data()}}, c.buf.h.data(), T);
}

void norm_qk_heads(LayerContext& c) {
  const int T = c.batch.size(), d = c.config.head_dim;
  rms_norm(c.buf.q.data(), c.w.q_norm.data(), int64_t{T} * c.config.num_heads, d, c.config.rms_norm_eps, c.buf.q.data());
  rms_norm(c.buf.k.data(), c.w.k_norm.data(), int64_t{T} * c.config.num_kv_heads, d, c.config.rms_norm_eps, c.buf.k.data());
}

void rotate_qk(LayerContext& c) {
  const ModelConfig& m = c.config;
  const int T = c.batch.size();
  const int64_t q_dim = int64_t{m.num_heads} * m.head_dim, kv_dim = int64_t{m.num_kv_heads} * m.head_dim;
#pragma omp parallel for schedule(static) if (T > 1)
  for (int t = 0; t < T; ++t) {
    const int64_t pos = c.batch.positions[t];
    apply_rope(c.buf.q.data() + t * q_dim, m.num_heads, m.head_dim, pos, c.rope_inv_freq.data(), m.rope_pairing);
    apply_rope(c.buf.k.data() + t * kv_dim, m.num_kv_heads, m.head_dim, pos, c.rope_inv_freq.data(), m.rope_pairing);
  }
}

namespace {

// The attention arguments of token t of the batch that do not depend on the cache's formats.
PagedAttentionArgs attention_args(const LayerContext& c, int t, const float* q, float scale, float* out) {
  PagedAttentionArgs a;
  a.q = q;
  a.n_q_heads = c.config.num_heads;
  a.n_kv_heads = c.config.num_kv_heads;
  a.head_dim = c.config.head_dim;
  a.block_table = c.batch.tables[t]->blocks.data();
  a.block_size = c.cache.shape().block_size;
  a.n_ctx = c.batch.positions[t] + 1;
  a.scale = scale;
  a.out = out;
  return a;
}

// Full-precision K and V with KvQuantOptions::exact_fp_attention: the exact kernel (the plain
// loop's arithmetic, the FP path's results from before any fast kernel existed). Work items are
// (token, KV head) pairs so that a single decoding sequence still uses every thread; a head's
// arithmetic does not depend on which thread runs it. Arguments are checked before the parallel
// loop: an exception thrown inside it would terminate the program.
void attend_fp(LayerContext& c, float scale) {
  const ModelConfig& m = c.config;
  const int T = c.batch.size(), n_kv = m.num_kv_heads;
  const int64_t q_dim = int64_t{m.num_heads} * m.head_dim;
  const PagedRows k_pages = c.cache.k_pages(c.layer), v_pages = c.cache.v_pages(c.layer);
  const auto token_args = [&](int t) {
    PagedAttentionArgs a = attention_args(c, t, c.buf.q.data() + t * q_dim, scale, c.buf.attn.data() + t * q_dim);
    a.k = k_pages;
    a.v = v_pages;
    return a;
  };
  for (int t = 0; t < T; ++t) check_paged_attention_args(token_args(t));
#pragma omp parallel for schedule(dynamic) if (T * n_kv > 1)
  for (int item = 0; item < T * n_kv; ++item) {
    const int t = item / n_kv, g = item % n_kv;
    PagedAttentionArgs a = token_args(t);
    a.kv_head_begin = g;
    a.kv_head_end = g + 1;
    paged_attention_exact(a);
  }
}

// A quantized cache's context is attended in parts of kAttentionPartRows positions (the last
// one shorter), each its own work item, then combined: a single long sequence then keeps every
// thread busy instead of one per KV head. The parts depend only on the token's position, so a
// token's result is the same whatever else is in the batch.
constexpr int kAttentionPartRows = 256;

// A prefill chunk's tokens are attended in blocks of up to kQueriesPerBlock consecutive tokens of
// one sequence (paged_attention_fast_queries decodes each tile of rows once for the block), as
// long as the block's part outputs fit in kBlockPartBytes per thread.
constexpr int kQueriesPerBlock = 16;
constexpr size_t kBlockPartBytes = size_t(4) << 20;

// KV heads per attention work item: as many as still leave kMinItemsPerThread items per thread
// (`items_per_head`: the items there would be with one head each). A kernel call pays fixed costs
// per head range (queries to int8, accumulators, the first tiles' reads before prefetching
// catches up), and a block keeps its heads' rows next to each other, so wider ranges read memory
// in longer runs: at 16k context one call per part and all 8 KV heads attends 1.3x faster than
// one call per (part, head) (bench_attention_decode decode_long). A head's arithmetic is the same
// in any range, so no result depends on this choice or on the thread count behind it.
constexpr int kMinItemsPerThread = 8;
int heads_per_item(int items_per_head, int n_kv) {
  const int wanted = kMinItemsPerThread * omp_get_max_threads();
  const int ranges = std::clamp((wanted + items_per_head - 1) / std::max(items_per_head, 1), 1, n_kv);
  return (n_kv + ranges - 1) / ranges;
}

// Every block whose rows a token reads from the windows has its window block: a broken
// invariant of kv/block_pool.h fails here instead of reading another block's rows.
void check_window_rows(const LayerContext& c) {
  const KvWindowStore* store = c.cache.window_store();
  const KvWindows& w = c.cache.shape().windows;
  const int bs = c.cache.shape().block_size;
  for (int t = 0; t < c.batch.size(); ++t) {
    const int p = c.batch.positions[t];
    const auto& blocks = c.batch.tables[t]->blocks;
    const auto check = [&](int i) {
      if (!store->has_window(blocks[i]))
        fail("KV windows: position {} reads block {} (index {}) at full precision, but it has no window block", p,
             blocks[i], i);
    };
    for (int i = 0; i < w.sink_end_block(p, bs); ++i) check(i);
    for (int i = w.recent_begin_block(p, bs); i <= p / bs; ++i) check(i);
  }
}

// The fast kernel over context parts. Quantized K and/or V: q goes into K's storage space once
// per head, the kernel scores and accumulates rows as stored (rotated space for TurboQuant), and
// the output comes back from V's storage space once per head. A full-precision layer (`fp`) reads
// q and writes the output as they are, with neither windows nor exact chunk rows: its pages hold
// every row at full precision already. Arguments are checked before the parallel region, as in
// attend_fp.
void attend_parts(LayerContext& c, float scale, bool fp) {
  const ModelConfig& m = c.config;
  const int T = c.batch.size(), d = m.head_dim, group = m.num_heads / m.num_kv_heads, n_kv = m.num_kv_heads;
  const int64_t q_dim = int64_t{m.num_heads} * d, kv_dim = int64_t{n_kv} * d;
  const KvRowCodec& kc = c.cache.k_codec(c.layer);
  const KvRowCodec& vc = c.cache.v_codec(c.layer);
  const PagedRows k_pages = c.cache.k_pages(c.layer), v_pages = c.cache.v_pages(c.layer);
  const bool exact_chunk = !fp && c.cache.options().exact_chunk_rows;
  const bool use_windows = !fp && c.cache.shape().windows.any();
  const KvWindows& windows = c.cache.shape().windows;
  const PagedRows k_window = use_windows ? c.cache.window_k_pages(c.layer) : PagedRows{};
  const PagedRows v_window = use_windows ? c.cache.window_v_pages(c.layer) : PagedRows{};
  if (windows.any() && c.layer == 0) check_window_rows(c);
  if (exact_chunk) {
    // This step's own K/V rows, unquantized, in storage space (what encode() would code).
    for (int t = 0; t < T; ++t)
      for (int g = 0; g < n_kv; ++g) {
        kc.exact_storage_row(c.buf.k.data() + t * kv_dim + g * d, g, c.buf.k_exact.data() + t * kv_dim + g * d);
        vc.exact_storage_row(c.buf.v.data() + t * kv_dim + g * d, g, c.buf.v_exact.data() + t * kv_dim + g * d);
      }
  }
  // Where the kernel reads q and writes its output: the storage-space buffers, or for a
  // full-precision layer the model's own.
  const float* q_store = fp ? c.buf.q.data() : c.buf.q_store.data();
  float* attn_store = fp ? c.buf.attn.data() : c.buf.attn_store.data();
  // Token t's parts are slots first_part[t] .. first_part[t + 1] - 1 of the part buffers.
  std::vector<int>& first_part = c.buf.first_part;  // [T + 1]
  first_part.assign(T + 1, 0);
  for (int t = 0; t < T; ++t)
    first_part[t + 1] = first_part[t] + (c.batch.positions[t] + kAttentionPartRows) / kAttentionPartRows;
  const int n_parts = first_part[T];
  // Blocks of tokens attended together when the parts are not spread: consecutive tokens of one
  // sequence (the same table, consecutive positions), at most kQueriesPerBlock, part outputs within
  // kBlockPartBytes. Tokens b of block_first[b] .. block_first[b + 1] - 1.
  std::vector<int>& block_first = c.buf.query_block_first;
  block_first.assign(1, 0);
  for (int t = 1; t < T; ++t) {
    const int first = block_first.back(), count = t - first;
    const size_t part_bytes = size_t(count + 1) * (first_part[t + 1] - first_part[t]) * q_dim * sizeof(float);
    const bool same_run = c.batch.tables[t] == c.batch.tables[t - 1] && c.batch.positions[t] == c.batch.positions[t - 1] + 1;
    if (!same_run || count >= kQueriesPerBlock || part_bytes > kBlockPartBytes) block_first.push_back(t);
  }
  block_first.push_back(T);
  const int n_blocks = static_cast<int>(block_first.size()) - 1;
  // Who computes a token's parts: with fewer (token, KV head) pairs than kMinItemsPerThread per
  // thread and more parts than tokens (a few long sequences decoding), every part is its own work
  // item, with a range of KV heads, and the parts meet in the shared part buffers; otherwise each
  // (block of tokens, KV head range) item runs its parts one after another into its thread's
  // buffers, which stay as small as one block's parts. Either way each part is the same kernel
  // call and the parts are combined in the same order, so the result is the same bits.
  const bool spread_parts = n_parts > T && T * n_kv < kMinItemsPerThread * omp_get_max_threads();
  const int range_heads = heads_per_item(spread_parts ? n_parts : n_blocks, n_kv);
  const int head_ranges = (n_kv + range_heads - 1) / range_heads;
  if (spread_parts) {
    c.buf.part_out.resize(size_t(n_parts) * q_dim);
    c.buf.part_max.resize(size_t(n_parts) * m.num_heads);
    c.buf.part_sum.resize(size_t(n_parts) * m.num_heads);
  }
  // The arguments of part slot `slot` (every KV head); a part of several writes its unnormalized
  // output to part_out [num_heads, d] and its statistics to part_max / part_sum [num_heads].
  const auto part_args = [&](int slot, float* part_out, float* part_max, float* part_sum) {
    const int t = static_cast<int>(std::upper_bound(first_part.begin(), first_part.end(), slot) - first_part.begin()) - 1;
    const int part = slot - first_part[t], parts = first_part[t + 1] - first_part[t];
    float* out = parts == 1 ? attn_store + t * q_dim : part_out;
    PagedAttentionArgs a = attention_args(c, t, q_store + t * q_dim, scale, out);
    a.k = k_pages;
    a.v = v_pages;
    a.int8_key_scores = c.cache.options().int8_key_scores;
    a.int8_value_sums = c.cache.options().int8_value_sums;
    if (use_windows) {  // which rows t reads at full precision depends on its position alone
      a.windows = true;
      a.window_k = k_window;
      a.window_v = v_window;
      std::tie(a.coded_begin, a.coded_end) = windows.coded_range(c.batch.positions[t]);
    }
    a.ctx_begin = part * kAttentionPartRows;
    a.n_ctx = std::min(a.n_ctx, (part + 1) * kAttentionPartRows);
    if (parts > 1) {
      a.partial_max = part_max;
      a.partial_sum = part_sum;
    }
    if (exact_chunk) {
      // The chunk of t's sequence in this batch: consecutive tokens with the same table.
      int first = t;
      while (first > 0 && c.batch.tables[first - 1] == c.batch.tables[t] &&
             c.batch.positions[first - 1] == c.batch.positions[first] - 1)
        --first;
      // Rows from the chunk's first position on come from the exact arrays (none of this part's
      // when the chunk starts after it).
      a.exact_from = std::min(c.batch.positions[first], a.n_ctx);
      a.exact_k = c.buf.k_exact.data() + first * kv_dim;
      a.exact_v = c.buf.v_exact.data() + first * kv_dim;
    }
    return a;
  };
  const auto shared_part_args = [&](int slot) {
    return part_args(slot, c.buf.part_out.data() + size_t(slot) * q_dim, c.buf.part_max.data() + size_t(slot) * m.num_heads,
                     c.buf.part_sum.data() + size_t(slot) * m.num_heads);
  };
  {
    float placeholder = 0;  // the checks look at which pointers are set, not at what they hold
    for (int slot = 0; slot < n_parts; ++slot)
      check_paged_attention_args(part_args(slot, &placeholder, &placeholder, &placeholder));
  }
#pragma omp parallel if (T * n_kv > 1 || n_parts > T)
  {
#pragma omp for schedule(static)
    for (int item = 0; item < (fp ? 0 : T * n_kv); ++item) {  // q into K's storage space, per (token, KV head)
      const int t = item / n_kv, g = item % n_kv;
      for (int h = g * group; h < (g + 1) * group; ++h)
        kc.query_to_storage(c.buf.q.data() + t * q_dim + h * d, g, c.buf.q_store.data() + t * q_dim + h * d);
    }
    if (spread_parts) {
#pragma omp for schedule(dynamic)
      for (int item = 0; item < n_parts * head_ranges; ++item) {  // (part, KV head range) pairs
        const int slot = item / head_ranges, g = item % head_ranges * range_heads;
        PagedAttentionArgs a = shared_part_args(slot);
        a.kv_head_begin = g;
        a.kv_head_end = std::min(g + range_heads, n_kv);
        paged_attention_fast(a);
      }
    } else {
#pragma omp for schedule(dynamic)
      for (int item = 0; item < n_blocks * head_ranges; ++item) {  // (block of tokens, KV head range) pairs, parts in order
        const int b = item / head_ranges, g = item % head_ranges * range_heads, g_end = std::min(g + range_heads, n_kv);
        const int t_begin = block_first[b], t_end = block_first[b + 1], n_tokens = t_end - t_begin;
        int max_parts = 0;
        for (int t = t_begin; t < t_end; ++t) max_parts = std::max(max_parts, first_part[t + 1] - first_part[t]);
        // Token t's part p: slot (t - t_begin) * max_parts + p.
        thread_local std::vector<float> part_out, part_max, part_sum;  // [slots, num_heads (, d)]
        thread_local std::vector<PagedAttentionArgs> queries;          // [tokens of the block]
        if (max_parts > 1) {
          part_out.resize(size_t(n_tokens) * max_parts * q_dim);
          part_max.resize(size_t(n_tokens) * max_parts * m.num_heads);
          part_sum.resize(size_t(n_tokens) * max_parts * m.num_heads);
        }
        for (int p = 0; p < max_parts; ++p) {
          queries.clear();
          for (int t = t_begin; t < t_end; ++t) {
            const int parts = first_part[t + 1] - first_part[t];
            if (p >= parts) continue;
            const size_t slot = size_t(t - t_begin) * max_parts + p;
            PagedAttentionArgs a = parts == 1 ? part_args(first_part[t], nullptr, nullptr, nullptr)
                                              : part_args(first_part[t] + p, part_out.data() + slot * q_dim,
                                                          part_max.data() + slot * m.num_heads,
                                                          part_sum.data() + slot * m.num_heads);
            a.kv_head_begin = g;
            a.kv_head_end = g_end;
            queries.push_back(a);
          }
          paged_attention_fast_queries(queries.data(), static_cast<int>(queries.size()));
        }
        for (int t = t_begin; t < t_end; ++t) {
          const int parts = first_part[t + 1] - first_part[t];
          if (parts == 1) continue;
          const size_t first_slot = size_t(t - t_begin) * max_parts, h0 = size_t(g) * group;
          combine_attention_parts(parts, part_out.data() + first_slot * q_dim + h0 * d, q_dim,
                                  part_max.data() + first_slot * m.num_heads + h0,
                                  part_sum.data() + first_slot * m.num_heads + h0, m.num_heads, (g_end - g) * group,
                                  d, attn_store + t * q_dim + h0 * d);
        }
      }
    }
#pragma omp for schedule(static)
    for (int item = 0; item < T * n_kv; ++item) {  // combine spread parts; output from V's storage space
      const int t = item / n_kv, g = item % n_kv;
      float* out_store = attn_store + t * q_dim;
      const int parts = first_part[t + 1] - first_part[t];
      if (spread_parts && parts > 1) {  // the group's heads of each of t's parts, slots q_dim / num_heads apart
        const size_t slot = first_part[t], h0 = size_t(g) * group;
        combine_attention_parts(parts, c.buf.part_out.data() + slot * q_dim + h0 * d, q_dim,
                                c.buf.part_max.data() + slot * m.num_heads + h0, c.buf.part_sum.data() + slot * m.num_heads + h0,
                                m.num_heads, group, d, out_store + h0 * d);
      }
      if (!fp)
        for (int h = g * group; h < (g + 1) * group; ++h)
          vc.output_from_storage(out_store + h * d, g, c.buf.attn.data() + t * q_dim + h * d);
    }
  }
}

}  // namespace

void attend(LayerContext& c) {
  const ModelConfig& m = c.config;
  const int T = c.batch.size();
  const int64_t kv_dim = int64_t{m.num_kv_heads} * m.head_dim;
  if (c.observer) (*c.observer)(c.layer, T, c.buf.q.data(), c.buf.k.data());
  // Write every token's K/V first: a token then reads the same cached rows whether its
  // neighbours came in this step or an earlier one (and, for quantized pages, a prompt's own
  // tokens are seen exactly as a later decode step will see them).
  for (int t = 0; t < T; ++t)
    c.cache.write(c.layer, *c.batch.tables[t], c.batch.positions[t], c.buf.k.data() + t * kv_dim,
                  c.buf.v.data() + t * kv_dim);
  const float scale = 1.0f / std::sqrt(static_cast<float>(m.head_dim));
  const bool fp = c.cache.layer_is_fp(c.layer);
  if (fp && c.cache.options().exact_fp_attention) {
    attend_fp(c, scale);
  } else {
    attend_parts(c, scale, fp);
  }
}

void add_attention_output(LayerContext& c) {
  const int T = c.batch.size();
  const int64_t hidden = c.config.hidden_size;
  apply_linear(c.w.wo, c.buf.attn.data(), T, c.buf.out.data());
  for (int64_t i = 0; i < T * hidden; ++i) c.buf.x[i] += c.buf.out[i];
}

void add_swiglu_mlp(LayerContext& c) {
  const int T = c.batch.size();
  const int64_t hidden = c.config.hidden_size, ffn = c.config.intermediate_size;
  apply_linears({{c.w.w_gate, c.buf.gate.data()}, {c.w.w_up, c.buf.up.data()}}, c.buf.h.data(), T);
  silu_mul(c.buf.gate.data(), c.buf.up.data(), T * ffn, c.buf.gate.data());
  apply_linear(c.w.w_down, c.buf.gate.data(), T, c.buf.out.data());
  for (int64_t i = 0; i < T * hidden; ++i) c.buf.x[i] += c.buf.out[i];
}

}  // namespace tq
