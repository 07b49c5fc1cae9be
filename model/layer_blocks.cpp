#include "model/layer_blocks.h"

#include <cmath>

#include "kernels/activation.h"
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

void attend(LayerContext& c) {
  const ModelConfig& m = c.config;
  const int T = c.batch.size();
  const int64_t q_dim = int64_t{m.num_heads} * m.head_dim, kv_dim = int64_t{m.num_kv_heads} * m.head_dim;
  // Write every token's K/V first: a token then reads the same cached rows whether its
  // neighbours came in this step or an earlier one.
  for (int t = 0; t < T; ++t)
    c.cache.write(c.layer, *c.batch.tables[t], c.batch.positions[t], c.buf.k.data() + t * kv_dim,
                  c.buf.v.data() + t * kv_dim);
  const PagedRows k_pages = c.cache.k_pages(c.layer), v_pages = c.cache.v_pages(c.layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(m.head_dim));
#pragma omp parallel for schedule(dynamic) if (T > 1)
  for (int t = 0; t < T; ++t) {
    FpAttentionArgs a;
    a.q = c.buf.q.data() + t * q_dim;
    a.n_q_heads = m.num_heads;
    a.n_kv_heads = m.num_kv_heads;
    a.head_dim = m.head_dim;
    a.block_table = c.batch.tables[t]->blocks.data();
    a.block_size = c.cache.shape().block_size;
    a.n_ctx = c.batch.positions[t] + 1;
    a.k = k_pages;
    a.v = v_pages;
    a.scale = scale;
    a.out = c.buf.attn.data() + t * q_dim;
    paged_attention_fp(a);
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
