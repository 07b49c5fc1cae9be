#include "kernels/attention_fp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/dequantize.h"

namespace tq {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kMaxGroup = 64;  // query heads per KV head

// Row (fp32 view) of a page: returns a pointer to fp32 values, converting into `scratch` when
// the pages are 16-bit.
inline const float* load_row(const PagedRows& rows, const uint8_t* row, int d, float* scratch) {
  switch (rows.elem) {
    case FpElem::F32:
      return reinterpret_cast<const float*>(row);
    case FpElem::BF16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
      for (int i = 0; i < d; ++i) scratch[i] = bf16_to_fp32(h[i]);
      return scratch;
    }
    case FpElem::F16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
      for (int i = 0; i < d; ++i) scratch[i] = fp16_to_fp32(h[i]);
      return scratch;
    }
  }
  return scratch;
}

}  // namespace

void paged_attention_fp(const FpAttentionArgs& a) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  float scratch[kMaxHeadDim];
  float running_max[kMaxGroup];
  float running_sum[kMaxGroup];
  std::vector<float> acc(static_cast<size_t>(group) * d);  // [group, d]
  for (int g = 0; g < a.n_kv_heads; ++g) {
    const float* q_group = a.q + static_cast<size_t>(g) * group * d;  // [group, d]
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(running_max, running_max + group, -std::numeric_limits<float>::infinity());
    std::fill(running_sum, running_sum + group, 0.0f);
    for (int t = 0; t < a.n_ctx; ++t) {
      const int32_t block = a.block_table[t / a.block_size];
      const int offset = t % a.block_size;
      const uint8_t* k_row = a.k.base + block * a.k.block_stride + g * a.k.head_stride + offset * a.k.row_stride;
      const uint8_t* v_row = a.v.base + block * a.v.block_stride + g * a.v.head_stride + offset * a.v.row_stride;
      const float* k = load_row(a.k, k_row, d, scratch);
      float score[kMaxGroup];
      for (int h = 0; h < group; ++h) {
        const float* q = q_group + static_cast<size_t>(h) * d;
        float dot = 0;
        for (int i = 0; i < d; ++i) dot += q[i] * k[i];
        score[h] = dot * a.scale;
      }
      const float* v = load_row(a.v, v_row, d, scratch);
      for (int h = 0; h < group; ++h) {
        float* acc_h = acc.data() + static_cast<size_t>(h) * d;
        float weight;
        if (score[h] > running_max[h]) {
          // New maximum: rescale what has been accumulated so far.
          const float correction = std::exp(running_max[h] - score[h]);
          running_sum[h] *= correction;
          for (int i = 0; i < d; ++i) acc_h[i] *= correction;
          running_max[h] = score[h];
          weight = 1.0f;
        } else {
          weight = std::exp(score[h] - running_max[h]);
        }
        running_sum[h] += weight;
        for (int i = 0; i < d; ++i) acc_h[i] += weight * v[i];
      }
    }
    for (int h = 0; h < group; ++h) {
      float* out = a.out + (static_cast<size_t>(g) * group + h) * d;
      const float inv = running_sum[h] > 0 ? 1.0f / running_sum[h] : 0.0f;
      for (int i = 0; i < d; ++i) out[i] = acc[static_cast<size_t>(h) * d + i] * inv;
    }
  }
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
