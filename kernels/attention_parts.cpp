// Combining the parts of a split context (kernels/paged_attention.h combine_attention_parts): the
// scalar loop and its AVX-512 form, bit for bit. This file is compiled without floating-point
// contraction (CMakeLists.txt), so neither loop's `sum + weight * value` is ever fused, whatever
// the build's target.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "errors/error.h"
#include "kernels/paged_attention.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tq {

void combine_attention_parts(int n_parts, const float* part_out, size_t out_stride, const float* part_max,
                             const float* part_sum, size_t stat_stride, int n_heads, int head_dim, float* out) {
  if (combine_attention_parts_avx512_available(head_dim))
    combine_attention_parts_avx512(n_parts, part_out, out_stride, part_max, part_sum, stat_stride, n_heads, head_dim, out);
  else
    combine_attention_parts_scalar(n_parts, part_out, out_stride, part_max, part_sum, stat_stride, n_heads, head_dim, out);
}

void combine_attention_parts_scalar(int n_parts, const float* part_out, size_t out_stride, const float* part_max,
                                    const float* part_sum, size_t stat_stride, int n_heads, int head_dim, float* out) {
  for (int h = 0; h < n_heads; ++h) {
    float top = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < n_parts; ++p) top = std::max(top, part_max[p * stat_stride + h]);
    float* o = out + size_t(h) * head_dim;
    std::fill(o, o + head_dim, 0.0f);
    float total = 0;
    for (int p = 0; p < n_parts; ++p) {
      const float m = part_max[p * stat_stride + h];
      if (m == -std::numeric_limits<float>::infinity()) continue;  // an empty part
      const float w = std::exp(m - top);
      total += w * part_sum[p * stat_stride + h];
      const float* po = part_out + p * out_stride + size_t(h) * head_dim;
      for (int j = 0; j < head_dim; ++j) o[j] += w * po[j];
    }
    const float inv = total > 0 ? 1.0f / total : 0.0f;
    for (int j = 0; j < head_dim; ++j) o[j] *= inv;
  }
}

#if defined(__x86_64__) || defined(__i386__)

bool combine_attention_parts_avx512_available(int head_dim) {
  static const bool cpu = __builtin_cpu_supports("avx512f");
  return cpu && head_dim % 16 == 0;
}

// combine_attention_parts_scalar's operations per element, in its order: each part's weight from
// the same expf, its product and sum rounded apart, up to 128 elements of a head kept in registers
// across the parts.
__attribute__((target("avx512f"))) void combine_attention_parts_avx512(int n_parts, const float* part_out, size_t out_stride,
                                              const float* part_max, const float* part_sum, size_t stat_stride,
                                              int n_heads, int head_dim, float* out) {
  if (!combine_attention_parts_avx512_available(head_dim))
    fail("combine attention parts: the AVX-512 loop needs an AVX-512F CPU and head_dim % 16 == 0 (head_dim {})", head_dim);
  thread_local std::vector<float> weight;  // [n_parts]: 0 for an empty part, which is skipped
  weight.resize(n_parts);
  constexpr int kChunk = 128;
  for (int h = 0; h < n_heads; ++h) {
    float top = -std::numeric_limits<float>::infinity();
    for (int p = 0; p < n_parts; ++p) top = std::max(top, part_max[p * stat_stride + h]);
    float total = 0;
    for (int p = 0; p < n_parts; ++p) {
      const float m = part_max[p * stat_stride + h];
      weight[p] = 0;
      if (m == -std::numeric_limits<float>::infinity()) continue;
      weight[p] = std::exp(m - top);
      total += weight[p] * part_sum[p * stat_stride + h];
    }
    const float inv = total > 0 ? 1.0f / total : 0.0f;
    for (int j0 = 0; j0 < head_dim; j0 += kChunk) {
      const int vectors = std::min(kChunk, head_dim - j0) / 16;
      __m512 acc[kChunk / 16];
      for (int i = 0; i < vectors; ++i) acc[i] = _mm512_setzero_ps();
      for (int p = 0; p < n_parts; ++p) {
        if (part_max[p * stat_stride + h] == -std::numeric_limits<float>::infinity()) continue;
        const __m512 w = _mm512_set1_ps(weight[p]);
        const float* po = part_out + p * out_stride + size_t(h) * head_dim + j0;
        for (int i = 0; i < vectors; ++i) acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(w, _mm512_loadu_ps(po + 16 * i)));
      }
      float* o = out + size_t(h) * head_dim + j0;
      for (int i = 0; i < vectors; ++i) _mm512_storeu_ps(o + 16 * i, _mm512_mul_ps(acc[i], _mm512_set1_ps(inv)));
    }
  }
}

#else

bool combine_attention_parts_avx512_available(int) { return false; }

void combine_attention_parts_avx512(int, const float*, size_t, const float*, const float*, size_t, int, int, float*) {
  fail("combine attention parts: the AVX-512 loop is not built for this architecture");
}

#endif

}  // namespace tq
