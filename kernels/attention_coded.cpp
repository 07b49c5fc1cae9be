#include "kernels/attention_coded.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "errors/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_HAVE_X86 1
#else
#define TQ_HAVE_X86 0
#endif

namespace tq {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kMaxGroup = 64;  // query heads per KV head

int kv_head_end(const CodedAttentionArgs& a) { return a.kv_head_end < 0 ? a.n_kv_heads : a.kv_head_end; }

void check_args(const CodedAttentionArgs& a) {
  if (a.kv_head_begin < 0 || a.kv_head_begin > kv_head_end(a) || kv_head_end(a) > a.n_kv_heads)
    fail("coded attention: KV head range [{}, {}) is not within 0..{}", a.kv_head_begin, kv_head_end(a), a.n_kv_heads);
  if (a.n_q_heads <= 0 || a.n_kv_heads <= 0 || a.n_q_heads % a.n_kv_heads != 0) {
    fail("coded attention: n_q_heads ({}) must be a positive multiple of n_kv_heads ({})", a.n_q_heads,
         a.n_kv_heads);
  }
  if (a.n_q_heads / a.n_kv_heads > kMaxGroup) {
    fail("coded attention: {} query heads per KV head, at most {} supported", a.n_q_heads / a.n_kv_heads,
         kMaxGroup);
  }
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) {
    fail("coded attention: head_dim {} must be in 1..{}", a.head_dim, kMaxHeadDim);
  }
  if (a.k.format.dim != a.head_dim || a.v.format.dim != a.head_dim) {
    fail("coded attention: row formats are for head_dim {} / {}, not {}", a.k.format.dim, a.v.format.dim,
         a.head_dim);
  }
  check_coded_row_format(a.k.format);
  check_coded_row_format(a.v.format);
  if (a.n_ctx < 0) fail("coded attention: n_ctx {} is negative", a.n_ctx);
  if (a.n_ctx > 0 && a.block_size <= 0) fail("coded attention: block_size {} must be positive", a.block_size);
  if (!a.q || !a.out || (a.n_ctx > 0 && (!a.block_table || !a.k.base || !a.v.base))) {
    fail("coded attention: a required pointer argument is null");
  }
  if (a.exact_from >= 0 && (a.exact_from > a.n_ctx || !a.exact_k || !a.exact_v)) {
    fail("coded attention: exact rows from position {} need both row arrays and at most n_ctx ({})", a.exact_from,
         a.n_ctx);
  }
}

inline const uint8_t* row_ptr(const CodedPagedRows& rows, int32_t block, int g, int offset) {
  return rows.base + size_t(block) * rows.block_stride + size_t(g) * rows.head_stride + size_t(offset) * rows.row_stride;
}

using RowDecoder = void (*)(const CodedRowFormat&, const uint8_t*, float*);

// Row t of KV head g of one side (K: key = true) into out[head_dim]: the exact row when the
// caller passed one for t, else the page row decoded.
inline void load_row(const CodedAttentionArgs& a, bool key, int t, int g, RowDecoder decode, float* out) {
  if (a.exact_from >= 0 && t >= a.exact_from) {
    const float* exact = (key ? a.exact_k : a.exact_v) + (size_t(t - a.exact_from) * a.n_kv_heads + g) * a.head_dim;
    std::copy(exact, exact + a.head_dim, out);
    return;
  }
  const CodedPagedRows& rows = key ? a.k : a.v;
  decode(rows.format, row_ptr(rows, a.block_table[t / a.block_size], g, t % a.block_size), out);
}

}  // namespace

namespace {

// The plain loop: online softmax per query head, each K/V row decoded once for its group.
void attention_scalar_loop(const CodedAttentionArgs& a, RowDecoder decode) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  float k_row[kMaxHeadDim], v_row[kMaxHeadDim];
  float running_max[kMaxGroup], running_sum[kMaxGroup], score[kMaxGroup];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  for (int g = a.kv_head_begin; g < kv_head_end(a); ++g) {
    const float* q_group = a.q + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(running_max, running_max + group, -std::numeric_limits<float>::infinity());
    std::fill(running_sum, running_sum + group, 0.0f);
    for (int t = 0; t < a.n_ctx; ++t) {
      // Decode the K row once for the whole group.
      load_row(a, true, t, g, decode, k_row);
      for (int h = 0; h < group; ++h) {
        const float* q = q_group + size_t(h) * d;
        float dot = 0;
        for (int j = 0; j < d; ++j) dot += q[j] * k_row[j];
        score[h] = dot * a.scale;
      }
      load_row(a, false, t, g, decode, v_row);
      for (int h = 0; h < group; ++h) {
        float* acc_h = acc.data() + size_t(h) * d;
        float weight;
        if (score[h] > running_max[h]) {
          // New maximum: rescale what has been accumulated so far.
          const float correction = std::exp(running_max[h] - score[h]);
          running_sum[h] *= correction;
          for (int j = 0; j < d; ++j) acc_h[j] *= correction;
          running_max[h] = score[h];
          weight = 1.0f;
        } else {
          weight = std::exp(score[h] - running_max[h]);
        }
        running_sum[h] += weight;
        for (int j = 0; j < d; ++j) acc_h[j] += weight * v_row[j];
      }
    }
    for (int h = 0; h < group; ++h) {
      float* out = a.out + (size_t(g) * group + h) * d;
      const float inv = running_sum[h] > 0 ? 1.0f / running_sum[h] : 0.0f;
      for (int j = 0; j < d; ++j) out[j] = acc[size_t(h) * d + j] * inv;
    }
  }
}

}  // namespace

void paged_attention_coded_scalar(const CodedAttentionArgs& a) {
  check_args(a);
  attention_scalar_loop(a, decode_coded_row_scalar);
}

#if TQ_HAVE_X86

namespace {

#define TQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TQ_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

TQ_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// d % 8 == 0.
TQ_AVX2_INLINE float dot_avx2(const float* a, const float* b, int d) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
  int j = 0;
  for (; j + 32 <= d; j += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 8), _mm256_loadu_ps(b + j + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 16), _mm256_loadu_ps(b + j + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 24), _mm256_loadu_ps(b + j + 24), s3);
  }
  for (; j < d; j += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), s0);
  return hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

TQ_AVX2 void attention_avx2_impl(const CodedAttentionArgs& a) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  alignas(32) float k_row[kMaxHeadDim], v_row[kMaxHeadDim];
  float running_max[kMaxGroup], running_sum[kMaxGroup], score[kMaxGroup];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  for (int g = a.kv_head_begin; g < kv_head_end(a); ++g) {
    const float* q_group = a.q + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(running_max, running_max + group, -std::numeric_limits<float>::infinity());
    std::fill(running_sum, running_sum + group, 0.0f);
    for (int t = 0; t < a.n_ctx; ++t) {
      load_row(a, true, t, g, decode_coded_row_avx2, k_row);
      for (int h = 0; h < group; ++h) score[h] = dot_avx2(q_group + size_t(h) * d, k_row, d) * a.scale;
      load_row(a, false, t, g, decode_coded_row_avx2, v_row);
      for (int h = 0; h < group; ++h) {
        float* acc_h = acc.data() + size_t(h) * d;
        if (score[h] > running_max[h]) {
          // New maximum: rescale what has been accumulated so far; this row gets weight 1.
          const float correction = std::exp(running_max[h] - score[h]);
          running_sum[h] = running_sum[h] * correction + 1.0f;
          running_max[h] = score[h];
          const __m256 c = _mm256_set1_ps(correction);
          for (int j = 0; j < d; j += 8) {
            _mm256_storeu_ps(acc_h + j, _mm256_fmadd_ps(_mm256_loadu_ps(acc_h + j), c, _mm256_load_ps(v_row + j)));
          }
        } else {
          const float weight = std::exp(score[h] - running_max[h]);
          running_sum[h] += weight;
          const __m256 w = _mm256_set1_ps(weight);
          for (int j = 0; j < d; j += 8) {
            _mm256_storeu_ps(acc_h + j, _mm256_fmadd_ps(w, _mm256_load_ps(v_row + j), _mm256_loadu_ps(acc_h + j)));
          }
        }
      }
    }
    for (int h = 0; h < group; ++h) {
      float* out = a.out + (size_t(g) * group + h) * d;
      const __m256 inv = _mm256_set1_ps(running_sum[h] > 0 ? 1.0f / running_sum[h] : 0.0f);
      for (int j = 0; j < d; j += 8) {
        _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_loadu_ps(acc.data() + size_t(h) * d + j), inv));
      }
    }
  }
}

// The plain loop's arithmetic, bit for bit, with SIMD where it does not reorder anything:
// 8 positions' dot products run in 8 lanes, each lane summing over j in the loop's order;
// the accumulator update is elementwise. No FMA is enabled here, so no multiply-add is fused
// (the plain loop rounds the product and the sum separately).
#define TQ_EXACT __attribute__((target("avx2,f16c")))

// 8x8 transpose: out[j][i] = in[i][j] for a tile starting at column c of 8 rows.
TQ_EXACT inline void transpose8(const float (*rows)[kMaxHeadDim], int c, float (*out)[8]) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_load_ps(rows[i] + c);
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_store_ps(out[c + 0], _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_store_ps(out[c + 1], _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_store_ps(out[c + 2], _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_store_ps(out[c + 3], _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_store_ps(out[c + 4], _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_store_ps(out[c + 5], _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_store_ps(out[c + 6], _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_store_ps(out[c + 7], _mm256_permute2f128_ps(u3, u7, 0x31));
}

// Scores of 8 positions (k_cols: [d][8], transposed K rows) for H query heads at once
// (q: [H, d]) into score[i][h0 + u]. Each head's lanes sum over j in order, as the plain loop
// does; running the H heads' sums side by side only hides the add latency.
template <int H>
TQ_EXACT inline void scores8(const float* q, int d, const float (*k_cols)[8], __m256 scale, int h0,
                             float (*score)[kMaxGroup]) {
  __m256 dot[H];
  for (int u = 0; u < H; ++u) dot[u] = _mm256_setzero_ps();
  for (int j = 0; j < d; ++j) {
    const __m256 k = _mm256_load_ps(k_cols[j]);
    for (int u = 0; u < H; ++u) dot[u] = _mm256_add_ps(dot[u], _mm256_mul_ps(_mm256_set1_ps(q[size_t(u) * d + j]), k));
  }
  alignas(32) float lanes[8];
  for (int u = 0; u < H; ++u) {
    _mm256_store_ps(lanes, _mm256_mul_ps(dot[u], scale));
    for (int i = 0; i < 8; ++i) score[i][h0 + u] = lanes[i];
  }
}

// d % 8 == 0.
TQ_EXACT void attention_exact_avx2_impl(const CodedAttentionArgs& a) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  alignas(32) float k_rows[8][kMaxHeadDim];
  alignas(32) float k_cols[kMaxHeadDim][8];
  alignas(32) float v_row[kMaxHeadDim];
  float running_max[kMaxGroup], running_sum[kMaxGroup];
  float score[8][kMaxGroup];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int g = a.kv_head_begin; g < kv_head_end(a); ++g) {
    const float* q_group = a.q + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(running_max, running_max + group, -std::numeric_limits<float>::infinity());
    std::fill(running_sum, running_sum + group, 0.0f);
    for (int t0 = 0; t0 < a.n_ctx; t0 += 8) {
      const int n = std::min(8, a.n_ctx - t0);
      for (int i = 0; i < n; ++i) {
        load_row(a, true, t0 + i, g, decode_coded_row_avx2, k_rows[i]);
      }
      if (n == 8) {
        for (int c = 0; c < d; c += 8) transpose8(k_rows, c, k_cols);
        for (int h = 0; h < group; h += 4) {
          switch (std::min(4, group - h)) {
            case 4: scores8<4>(q_group + size_t(h) * d, d, k_cols, scale, h, score); break;
            case 3: scores8<3>(q_group + size_t(h) * d, d, k_cols, scale, h, score); break;
            case 2: scores8<2>(q_group + size_t(h) * d, d, k_cols, scale, h, score); break;
            default: scores8<1>(q_group + size_t(h) * d, d, k_cols, scale, h, score); break;
          }
        }
      } else {
        for (int i = 0; i < n; ++i)
          for (int h = 0; h < group; ++h) {
            const float* q = q_group + size_t(h) * d;
            float dot = 0;
            for (int j = 0; j < d; ++j) dot += q[j] * k_rows[i][j];
            score[i][h] = dot * a.scale;
          }
      }
      for (int i = 0; i < n; ++i) {
        load_row(a, false, t0 + i, g, decode_coded_row_avx2, v_row);
        for (int h = 0; h < group; ++h) {
          float* acc_h = acc.data() + size_t(h) * d;
          float weight;
          if (score[i][h] > running_max[h]) {
            const float correction = std::exp(running_max[h] - score[i][h]);
            running_sum[h] *= correction;
            const __m256 c = _mm256_set1_ps(correction);
            for (int j = 0; j < d; j += 8) _mm256_storeu_ps(acc_h + j, _mm256_mul_ps(_mm256_loadu_ps(acc_h + j), c));
            running_max[h] = score[i][h];
            weight = 1.0f;
          } else {
            weight = std::exp(score[i][h] - running_max[h]);
          }
          running_sum[h] += weight;
          const __m256 w = _mm256_set1_ps(weight);
          for (int j = 0; j < d; j += 8)
            _mm256_storeu_ps(acc_h + j, _mm256_add_ps(_mm256_loadu_ps(acc_h + j), _mm256_mul_ps(w, _mm256_load_ps(v_row + j))));
        }
      }
    }
    for (int h = 0; h < group; ++h) {
      float* out = a.out + (size_t(g) * group + h) * d;
      const float inv = running_sum[h] > 0 ? 1.0f / running_sum[h] : 0.0f;
      const __m256 iv = _mm256_set1_ps(inv);
      for (int j = 0; j < d; j += 8)
        _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_loadu_ps(acc.data() + size_t(h) * d + j), iv));
    }
  }
}

}  // namespace

void paged_attention_coded_scalar_fast_decode(const CodedAttentionArgs& a) {
  check_args(a);
  if (a.head_dim % 8 == 0 && coded_row_avx2_available(a.k.format) && coded_row_avx2_available(a.v.format)) {
    attention_exact_avx2_impl(a);
  } else {
    attention_scalar_loop(a, decode_coded_row_scalar);
  }
}

bool paged_attention_coded_avx2_available(const CodedAttentionArgs& a) {
  return coded_row_avx2_available(a.k.format) && coded_row_avx2_available(a.v.format) && a.head_dim % 8 == 0;
}

void paged_attention_coded_avx2(const CodedAttentionArgs& a) {
  check_args(a);
  if (!paged_attention_coded_avx2_available(a)) {
    fail("coded attention: the AVX2 kernel needs an AVX2+FMA+F16C CPU and head_dim % 8 == 0 (head_dim {})",
         a.head_dim);
  }
  attention_avx2_impl(a);
}

void paged_attention_coded(const CodedAttentionArgs& a) {
  if (paged_attention_coded_avx2_available(a)) {
    paged_attention_coded_avx2(a);
  } else {
    paged_attention_coded_scalar(a);
  }
}

#else  // !TQ_HAVE_X86

void paged_attention_coded_scalar_fast_decode(const CodedAttentionArgs& a) { paged_attention_coded_scalar(a); }

bool paged_attention_coded_avx2_available(const CodedAttentionArgs&) { return false; }

void paged_attention_coded_avx2(const CodedAttentionArgs& a) {
  check_args(a);
  fail("coded attention: the AVX2 kernel is not built for this architecture");
}

void paged_attention_coded(const CodedAttentionArgs& a) { paged_attention_coded_scalar(a); }

#endif

}  // namespace tq
