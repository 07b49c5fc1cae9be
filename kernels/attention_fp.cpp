#include "kernels/attention_fp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/attention_coded.h"

namespace tq {
// The FP cache's kernel is the coded kernel's plain loop over f32 / bf16 / f16 rows: one
// implementation of the online softmax, and the arithmetic is the FP path's, unchanged.
void paged_attention_fp(const FpAttentionArgs& a) {
  auto coded = [&](const PagedRows& rows) {
    CodedPagedRows c{rows.base, rows.block_stride, rows.head_stride, rows.row_stride, {}};
    c.format.codec = rows.elem == FpElem::F32 ? RowCodec::F32 : rows.elem == FpElem::BF16 ? RowCodec::BF16 : RowCodec::F16;
    c.format.dim = a.head_dim;
    return c;
  };
  CodedAttentionArgs c;
  c.q = a.q;
  c.n_q_heads = a.n_q_heads;
  c.n_kv_heads = a.n_kv_heads;
  c.head_dim = a.head_dim;
  c.block_table = a.block_table;
  c.block_size = a.block_size;
  c.n_ctx = a.n_ctx;
  c.k = coded(a.k);
  c.v = coded(a.v);
  c.scale = a.scale;
  c.out = a.out;
  c.kv_head_begin = a.kv_head_begin;
  c.kv_head_end = a.kv_head_end;
  paged_attention_coded_scalar_fast_decode(c);
}

void attention_reference(const float* q, const float* k, const float* v, int n_q_heads, int n_kv_heads, int head_dim,
                         int n_ctx, float scale, float* out) {
  const int group = n_q_heads / n_kv_heads;
  std::vector<double> p(n_ctx);
  for (int h = 0; h < n_q_heads; ++h) {
    const int g = h / group;
    double max_score = -1e300;
    for (int t = 0; t < n_ctx; ++t) {
      double dot = 0;
      for (int i = 0; i < head_dim; ++i)
        dot += static_cast<double>(q[h * head_dim + i]) * k[(static_cast<size_t>(t) * n_kv_heads + g) * head_dim + i];
      p[t] = dot * scale;
      max_score = std::max(max_score, p[t]);
    }
    double sum = 0;
    for (int t = 0; t < n_ctx; ++t) sum += (p[t] = std::exp(p[t] - max_score));
    for (int i = 0; i < head_dim; ++i) {
      double o = 0;
      for (int t = 0; t < n_ctx; ++t) o += p[t] * v[(static_cast<size_t>(t) * n_kv_heads + g) * head_dim + i];
      out[h * head_dim + i] = static_cast<float>(o / sum);
    }
  }
}

}  // namespace tq
