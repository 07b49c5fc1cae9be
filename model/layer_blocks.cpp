#include "model/layer_blocks.h"

#include <cmath>

#include "kernels/activation.h"
#include "kernels/attention_coded.h"
#include "kernels/attention_fp.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace tq {

void norm_input(LayerContext& c, const std::vector<float>& weight) {
  rms_norm(c.buf.x.data(), weight.data(), c.batch.size(), c.config.hidden_size, c.config.rms_norm_eps, c.buf.h.data());
}

void project_qkv(LayerContext& c) {
  const int T = c.batch.size();
  apply_linear(c.w.wq, c.buf.h.data(), T, c.buf.q.data());
  apply_linear(c.w.wk, c.buf.h.data(), T, c.buf.k.data());
  apply_linear(c.w.wv, c.buf.h.data(), T, c.buf.v.data());
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

// The fields both attention kernels' arguments share, for token t of the batch.
template <class Args>
Args attention_args(const LayerContext& c, int t, const float* q, float scale, float* out) {
  Args a;
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

// Full-precision K and V: the FP kernel, exactly as before quantized pages existed. Work items
// are (token, KV head) pairs so that a single decoding sequence still uses every thread; a
// head's arithmetic does not depend on which thread runs it.
void attend_fp(LayerContext& c, float scale) {
  const ModelConfig& m = c.config;
  const int T = c.batch.size(), n_kv = m.num_kv_heads;
  const int64_t q_dim = int64_t{m.num_heads} * m.head_dim;
  const PagedRows k_pages = c.cache.k_pages(c.layer), v_pages = c.cache.v_pages(c.layer);
#pragma omp parallel for schedule(dynamic) if (T * n_kv > 1)
  for (int item = 0; item < T * n_kv; ++item) {
    const int t = item / n_kv, g = item % n_kv;
    FpAttentionArgs a =
        attention_args<FpAttentionArgs>(c, t, c.buf.q.data() + t * q_dim, scale, c.buf.attn.data() + t * q_dim);
    a.k = k_pages;
    a.v = v_pages;
    a.kv_head_begin = g;
    a.kv_head_end = g + 1;
    paged_attention_fp(a);
  }
}

// Quantized K and/or V: q goes into K's storage space once per head, the kernel scores and
// accumulates rows as stored (rotated space for TurboQuant), and the output comes back from V's
// storage space once per head.
void attend_coded(LayerContext& c, float scale) {
  const ModelConfig& m = c.config;
  const int T = c.batch.size(), d = m.head_dim, group = m.num_heads / m.num_kv_heads;
  const int64_t q_dim = int64_t{m.num_heads} * d, kv_dim = int64_t{m.num_kv_heads} * d;
  const KvRowCodec& kc = c.cache.k_codec(c.layer);
  const KvRowCodec& vc = c.cache.v_codec(c.layer);
  const CodedPagedRows k_pages = c.cache.coded_k_pages(c.layer), v_pages = c.cache.coded_v_pages(c.layer);
  const bool exact_chunk = c.cache.options().exact_chunk_rows;
  if (exact_chunk) {
    // This step's own K/V rows, unquantized, in storage space (what encode() would code).
    for (int t = 0; t < T; ++t)
      for (int g = 0; g < m.num_kv_heads; ++g) {
        kc.exact_storage_row(c.buf.k.data() + t * kv_dim + g * d, g, c.buf.k_exact.data() + t * kv_dim + g * d);
        vc.exact_storage_row(c.buf.v.data() + t * kv_dim + g * d, g, c.buf.v_exact.data() + t * kv_dim + g * d);
      }
  }
  const int n_kv = m.num_kv_heads;
#pragma omp parallel for schedule(dynamic) if (T * n_kv > 1)
  for (int item = 0; item < T * n_kv; ++item) {  // (token, KV head) pairs, as in attend_fp
    const int t = item / n_kv, g = item % n_kv;
    float* q_store = c.buf.q_store.data() + t * q_dim;
    float* out_store = c.buf.attn_store.data() + t * q_dim;
    for (int h = g * group; h < (g + 1) * group; ++h)
      kc.query_to_storage(c.buf.q.data() + t * q_dim + h * d, g, q_store + h * d);
    CodedAttentionArgs a = attention_args<CodedAttentionArgs>(c, t, q_store, scale, out_store);
    a.k = k_pages;
    a.v = v_pages;
    if (exact_chunk) {
      // The chunk of t's sequence in this batch: consecutive tokens with the same table.
      int first = t;
      while (first > 0 && c.batch.tables[first - 1] == c.batch.tables[t] &&
             c.batch.positions[first - 1] == c.batch.positions[first] - 1)
        --first;
      a.exact_from = c.batch.positions[first];
      a.exact_k = c.buf.k_exact.data() + first * kv_dim;
      a.exact_v = c.buf.v_exact.data() + first * kv_dim;
    }
    a.kv_head_begin = g;
    a.kv_head_end = g + 1;
    paged_attention_coded(a);
    for (int h = g * group; h < (g + 1) * group; ++h)
      vc.output_from_storage(out_store + h * d, g, c.buf.attn.data() + t * q_dim + h * d);
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
  if (c.cache.layer_is_fp(c.layer)) {
    attend_fp(c, scale);
  } else {
    attend_coded(c, scale);
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
  norm_input(c, c.w.ffn_norm);
  apply_linear(c.w.w_gate, c.buf.h.data(), T, c.buf.gate.data());
  apply_linear(c.w.w_up, c.buf.h.data(), T, c.buf.up.data());
  silu_mul(c.buf.gate.data(), c.buf.up.data(), T * ffn, c.buf.gate.data());
  apply_linear(c.w.w_down, c.buf.gate.data(), T, c.buf.out.data());
  for (int64_t i = 0; i < T * hidden; ++i) c.buf.x[i] += c.buf.out[i];
}

}  // namespace tq
