#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "errors/error.h"
#include "kernels/paged_attention_rows.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_HAVE_X86 1
#else
#define TQ_HAVE_X86 0
#endif

namespace tq {

using attention_detail::kMaxGroup;
using attention_detail::kMaxHeadDim;
using attention_detail::kv_head_end;

void check_paged_attention_args(const PagedAttentionArgs& a) {
  if (a.kv_head_begin < 0 || a.kv_head_begin > kv_head_end(a) || kv_head_end(a) > a.n_kv_heads)
    fail("paged attention: KV head range [{}, {}) is not within 0..{}", a.kv_head_begin, kv_head_end(a), a.n_kv_heads);
  if (a.n_q_heads <= 0 || a.n_kv_heads <= 0 || a.n_q_heads % a.n_kv_heads != 0) {
    fail("paged attention: n_q_heads ({}) must be a positive multiple of n_kv_heads ({})", a.n_q_heads,
         a.n_kv_heads);
  }
  if (a.n_q_heads / a.n_kv_heads > kMaxGroup) {
    fail("paged attention: {} query heads per KV head, at most {} supported", a.n_q_heads / a.n_kv_heads,
         kMaxGroup);
  }
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) {
    fail("paged attention: head_dim {} must be in 1..{}", a.head_dim, kMaxHeadDim);
  }
  if (a.k.format.dim != a.head_dim || a.v.format.dim != a.head_dim) {
    fail("paged attention: row formats are for head_dim {} / {}, not {}", a.k.format.dim, a.v.format.dim,
         a.head_dim);
  }
  check_coded_row_format(a.k.format);
  check_coded_row_format(a.v.format);
  if (a.n_ctx < 0) fail("paged attention: n_ctx {} is negative", a.n_ctx);
  if (a.ctx_begin < 0 || a.ctx_begin > a.n_ctx)
    fail("paged attention: ctx_begin {} is not within 0..n_ctx ({})", a.ctx_begin, a.n_ctx);
  if ((a.partial_max == nullptr) != (a.partial_sum == nullptr))
    fail("paged attention: partial_max and partial_sum come together");
  if (a.n_ctx > 0 && a.block_size <= 0) fail("paged attention: block_size {} must be positive", a.block_size);
  if (!a.q || !a.out || (a.n_ctx > 0 && (!a.block_table || !a.k.base || !a.v.base))) {
    fail("paged attention: a required pointer argument is null");
  }
  if (a.exact_from >= 0 && (a.exact_from > a.n_ctx || !a.exact_k || !a.exact_v)) {
    fail("paged attention: exact rows from position {} need both row arrays and at most n_ctx ({})", a.exact_from,
         a.n_ctx);
  }
  if (a.windows) {
    if (a.window_k.format.dim != a.head_dim || a.window_v.format.dim != a.head_dim || !a.window_k.base ||
        !a.window_v.base)
      fail("paged attention: window rows need both sides' pages for head_dim {}", a.head_dim);
    check_coded_row_format(a.window_k.format);
    check_coded_row_format(a.window_v.format);
  }
}

void check_same_sequence(const PagedAttentionArgs& a, const PagedAttentionArgs& b) {
  const auto same_pages = [](const PagedRows& x, const PagedRows& y) {
    return x.base == y.base && x.block_stride == y.block_stride && x.head_stride == y.head_stride &&
           x.row_stride == y.row_stride && x.block_map == y.block_map && x.format.codec == y.format.codec;
  };
  const bool same = a.n_q_heads == b.n_q_heads && a.n_kv_heads == b.n_kv_heads && a.head_dim == b.head_dim &&
                    a.block_table == b.block_table && a.block_size == b.block_size && same_pages(a.k, b.k) &&
                    same_pages(a.v, b.v) && a.windows == b.windows &&
                    (!a.windows || (same_pages(a.window_k, b.window_k) && same_pages(a.window_v, b.window_v))) &&
                    a.kv_head_begin == b.kv_head_begin && kv_head_end(a) == kv_head_end(b) &&
                    a.ctx_begin == b.ctx_begin && a.int8_key_scores == b.int8_key_scores &&
                    a.int8_value_sums == b.int8_value_sums &&
                    a.k.format.bits == b.k.format.bits && a.k.format.levels == b.k.format.levels &&
                    a.k.format.f16_scale == b.k.format.f16_scale && a.v.format.bits == b.v.format.bits &&
                    a.v.format.levels == b.v.format.levels && a.v.format.f16_scale == b.v.format.f16_scale;
  if (!same)
    fail("paged attention: queries computed together must share their sequence's pages, heads, first position "
         "and key and value arithmetic");
}

void paged_attention_fast_queries(const PagedAttentionArgs* queries, int n_queries) {
  bool together = n_queries > 1;
  for (int j = 0; j < n_queries && together; ++j) together = paged_attention_fast_avx512_available(queries[j]);
  if (together) {
    paged_attention_fast_avx512_queries(queries, n_queries);
  } else {
    for (int j = 0; j < n_queries; ++j) paged_attention_fast(queries[j]);
  }
}

namespace {

using namespace attention_detail;

// The plain loop: online softmax per query head, each K/V row decoded once for its group.
void attention_scalar_loop(const PagedAttentionArgs& a, RowDecoder decode) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  float k_row[kMaxHeadDim], v_row[kMaxHeadDim];
  float score[kMaxGroup];
  OnlineSoftmax softmax[kMaxGroup];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  for (int g = a.kv_head_begin; g < kv_head_end(a); ++g) {
    const float* q_group = a.q + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(softmax, softmax + group, OnlineSoftmax{});
    for (int t = a.ctx_begin; t < a.n_ctx; ++t) {
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
        Rescale rescale;
        const float weight = add_position(softmax[h], score[h], &rescale);
        if (rescale.needed)
          for (int j = 0; j < d; ++j) acc_h[j] *= rescale.correction;
        for (int j = 0; j < d; ++j) acc_h[j] += weight * v_row[j];
      }
    }
    for (int h = 0; h < group; ++h) write_head(a, g * group + h, softmax[h], acc.data() + size_t(h) * d);
  }
}

}  // namespace

void paged_attention_exact_scalar(const PagedAttentionArgs& a) {
  check_paged_attention_args(a);
  attention_scalar_loop(a, decode_coded_row_scalar);
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

#if TQ_HAVE_X86

namespace {

#define TQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TQ_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

// Both AVX2 kernels walk the context in tiles of kTile positions: the tile's K rows are decoded
// and scored for every query head of the group, its V rows decoded once, and then each head's
// accumulator (acc: [group, d]) is updated a column chunk at a time, held in registers across
// the whole tile instead of being loaded and stored once per row.
constexpr int kTile = 8;
constexpr int kChunk = 64;  // accumulator columns held in registers (8 vectors)

// All 8 lanes' sum.
TQ_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

TQ_AVX2_INLINE float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp(x) in 8 lanes for x <= 0 (the kernels only take exps of score - max): x = n ln2 + r with
// |r| <= ln2/2, exp(r) by Cephes' degree-6 polynomial (about 1 ulp), times 2^n built in the
// exponent bits. Below -87.3 (and -inf) it gives 0 rather than a denormal.
TQ_AVX2_INLINE __m256 exp_nonpositive(__m256 x) {
  const __m256 lowest = _mm256_set1_ps(-87.3f);
  const __m256 underflow = _mm256_cmp_ps(x, lowest, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lowest);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(y, _mm256_castsi256_ps(two_n)));
}

// Lane i = the full sum of v[i]'s 8 lanes.
TQ_AVX2_INLINE __m256 transpose_sums(const __m256 v[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Scores q . k_rows[i] * scale of a tile's n positions in lanes 0..n-1; lanes n..7 are -inf
// (rows n..7 must hold finite values: the caller zeroes them). d % 8 == 0.
TQ_AVX2_INLINE __m256 tile_scores(const float* q, const float (*k_rows)[kMaxHeadDim], int n, int d, float scale) {
  __m256 dot[kTile];
#pragma GCC unroll 8
  for (int i = 0; i < kTile; ++i) dot[i] = _mm256_setzero_ps();
  for (int j = 0; j < d; j += 8) {
    const __m256 qj = _mm256_loadu_ps(q + j);
#pragma GCC unroll 8
    for (int i = 0; i < kTile; ++i) dot[i] = _mm256_fmadd_ps(qj, _mm256_load_ps(k_rows[i] + j), dot[i]);
  }
  const __m256 s = _mm256_mul_ps(transpose_sums(dot), _mm256_set1_ps(scale));
  if (n == kTile) return s;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 live = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
  return _mm256_blendv_ps(_mm256_set1_ps(-std::numeric_limits<float>::infinity()), s, live);
}

// acc[0, 8 * V) = acc * correction (when rescale) + sum_i p[i] * v_rows[i][0, 8 * V), FMA.
template <int V>
TQ_AVX2_INLINE void accumulate_chunk(float* acc, bool rescale, float correction, const float* p,
                                     const float (*v_rows)[kMaxHeadDim], int col, int n) {
  __m256 r[V];
#pragma GCC unroll 8
  for (int u = 0; u < V; ++u) r[u] = _mm256_loadu_ps(acc + 8 * u);
  if (rescale) {
    const __m256 c = _mm256_set1_ps(correction);
#pragma GCC unroll 8
    for (int u = 0; u < V; ++u) r[u] = _mm256_mul_ps(r[u], c);
  }
  for (int i = 0; i < n; ++i) {
    const __m256 w = _mm256_set1_ps(p[i]);
#pragma GCC unroll 8
    for (int u = 0; u < V; ++u) r[u] = _mm256_fmadd_ps(w, _mm256_load_ps(v_rows[i] + col + 8 * u), r[u]);
  }
#pragma GCC unroll 8
  for (int u = 0; u < V; ++u) _mm256_storeu_ps(acc + 8 * u, r[u]);
}

// The AVX2 kernel: per tile, one running-max update and one rescale per head, the tile's
// weights exp'd 8 at a time, dot products and the weighted sum with FMA.
TQ_AVX2 void attention_avx2_impl(const PagedAttentionArgs& a) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  alignas(32) float k_rows[kTile][kMaxHeadDim], v_rows[kTile][kMaxHeadDim];
  alignas(32) float p[kTile];
  OnlineSoftmax softmax[kMaxGroup];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  for (int g = a.kv_head_begin; g < kv_head_end(a); ++g) {
    const float* q_group = a.q + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(softmax, softmax + group, OnlineSoftmax{});
    for (int t0 = a.ctx_begin; t0 < a.n_ctx; t0 += kTile) {
      const int n = std::min(kTile, a.n_ctx - t0);
      load_tile(a, true, t0, n, g, k_rows[0], kMaxHeadDim);
      for (int i = n; i < kTile; ++i) std::fill(k_rows[i], k_rows[i] + d, 0.0f);  // a short last tile
      load_tile(a, false, t0, n, g, v_rows[0], kMaxHeadDim);
      for (int h = 0; h < group; ++h) {
        const __m256 s = tile_scores(q_group + size_t(h) * d, k_rows, n, d, a.scale);
        // The whole tile's maximum at once (from -inf: a rescale by 0, of nothing).
        const Rescale r = raise_max(softmax[h], hmax(s));
        const bool rescale = r.needed;
        const float correction = r.correction;
        const __m256 w = exp_nonpositive(_mm256_sub_ps(s, _mm256_set1_ps(softmax[h].max)));
        _mm256_store_ps(p, w);
        softmax[h].sum = softmax[h].sum * correction + hsum(w);
        float* acc_h = acc.data() + size_t(h) * d;
        int col = 0;
        for (; col + kChunk <= d; col += kChunk) accumulate_chunk<8>(acc_h + col, rescale, correction, p, v_rows, col, n);
        switch ((d - col) / 8) {
          case 7: accumulate_chunk<7>(acc_h + col, rescale, correction, p, v_rows, col, n); break;
          case 6: accumulate_chunk<6>(acc_h + col, rescale, correction, p, v_rows, col, n); break;
          case 5: accumulate_chunk<5>(acc_h + col, rescale, correction, p, v_rows, col, n); break;
          case 4: accumulate_chunk<4>(acc_h + col, rescale, correction, p, v_rows, col, n); break;
          case 3: accumulate_chunk<3>(acc_h + col, rescale, correction, p, v_rows, col, n); break;
          case 2: accumulate_chunk<2>(acc_h + col, rescale, correction, p, v_rows, col, n); break;
          case 1: accumulate_chunk<1>(acc_h + col, rescale, correction, p, v_rows, col, n); break;
          default: break;
        }
      }
    }
    for (int h = 0; h < group; ++h) write_head(a, g * group + h, softmax[h], acc.data() + size_t(h) * d);
  }
}

// The plain loop's arithmetic, bit for bit, with SIMD where it does not reorder anything:
// 8 positions' dot products run in 8 lanes, each lane summing over j in the loop's order;
// the accumulator update is elementwise. No FMA is enabled here, so no multiply-add is fused
// (the plain loop rounds the product and the sum separately).
#define TQ_EXACT __attribute__((target("avx2,f16c")))
#define TQ_EXACT_INLINE __attribute__((target("avx2,f16c"), always_inline)) inline

// 8x8 transpose: out[j][i] = in[i][j] for a tile starting at column c of 8 rows.
TQ_EXACT_INLINE void transpose8(const float (*rows)[kMaxHeadDim], int c, float (*out)[8]) {
  __m256 r[8];
#pragma GCC unroll 8
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
// (q: [H, d]) into score[h0 + u][i]. Each head's lanes sum over j in order, as the plain loop
// does; running the H heads' sums side by side only hides the add latency.
template <int H>
TQ_EXACT_INLINE void scores8(const float* q, int d, const float (*k_cols)[8], __m256 scale, int h0,
                             float (*score)[kTile]) {
  __m256 dot[H];
#pragma GCC unroll 8
  for (int u = 0; u < H; ++u) dot[u] = _mm256_setzero_ps();
  for (int j = 0; j < d; ++j) {
    const __m256 k = _mm256_load_ps(k_cols[j]);
#pragma GCC unroll 8
    for (int u = 0; u < H; ++u) dot[u] = _mm256_add_ps(dot[u], _mm256_mul_ps(_mm256_set1_ps(q[size_t(u) * d + j]), k));
  }
#pragma GCC unroll 8
  for (int u = 0; u < H; ++u) _mm256_storeu_ps(score[h0 + u], _mm256_mul_ps(dot[u], scale));
}

// The plain loop's per-row update of acc[0, 8 * V) for rows 0..n-1 of a tile, in row order:
// rows whose score raised the running maximum first multiply acc by their correction, then
// every row adds weight * v (a rounded product, then a rounded sum).
template <int V>
TQ_EXACT_INLINE void accumulate_chunk_exact(float* acc, const Rescale* rescale, const float* weight,
                                            const float (*v_rows)[kMaxHeadDim], int col, int n) {
  __m256 r[V];
#pragma GCC unroll 8
  for (int u = 0; u < V; ++u) r[u] = _mm256_loadu_ps(acc + 8 * u);
  for (int i = 0; i < n; ++i) {
    if (rescale[i].needed) {
      const __m256 c = _mm256_set1_ps(rescale[i].correction);
#pragma GCC unroll 8
      for (int u = 0; u < V; ++u) r[u] = _mm256_mul_ps(r[u], c);
    }
    const __m256 w = _mm256_set1_ps(weight[i]);
#pragma GCC unroll 8
    for (int u = 0; u < V; ++u) r[u] = _mm256_add_ps(r[u], _mm256_mul_ps(w, _mm256_load_ps(v_rows[i] + col + 8 * u)));
  }
#pragma GCC unroll 8
  for (int u = 0; u < V; ++u) _mm256_storeu_ps(acc + 8 * u, r[u]);
}

// d % 8 == 0.
TQ_EXACT void attention_exact_avx2_impl(const PagedAttentionArgs& a) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  alignas(32) float k_rows[kTile][kMaxHeadDim];
  alignas(32) float k_cols[kMaxHeadDim][kTile];
  alignas(32) float v_rows[kTile][kMaxHeadDim];
  OnlineSoftmax softmax[kMaxGroup];
  float score[kMaxGroup][kTile];
  Rescale rescale[kTile];
  float weight[kTile];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int g = a.kv_head_begin; g < kv_head_end(a); ++g) {
    const float* q_group = a.q + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(softmax, softmax + group, OnlineSoftmax{});
    for (int t0 = 0; t0 < a.n_ctx; t0 += kTile) {
      const int n = std::min(kTile, a.n_ctx - t0);
      load_tile(a, true, t0, n, g, k_rows[0], kMaxHeadDim);
      load_tile(a, false, t0, n, g, v_rows[0], kMaxHeadDim);
      if (n == kTile) {
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
            score[h][i] = dot * a.scale;
          }
      }
      for (int h = 0; h < group; ++h) {
        // The running maximum and sum row by row, exactly as the plain loop; what each row does
        // to the accumulator is recorded and applied below, a column chunk at a time.
        for (int i = 0; i < n; ++i) weight[i] = add_position(softmax[h], score[h][i], &rescale[i]);
        float* acc_h = acc.data() + size_t(h) * d;
        int col = 0;
        for (; col + kChunk <= d; col += kChunk)
          accumulate_chunk_exact<8>(acc_h + col, rescale, weight, v_rows, col, n);
        switch ((d - col) / 8) {
          case 7: accumulate_chunk_exact<7>(acc_h + col, rescale, weight, v_rows, col, n); break;
          case 6: accumulate_chunk_exact<6>(acc_h + col, rescale, weight, v_rows, col, n); break;
          case 5: accumulate_chunk_exact<5>(acc_h + col, rescale, weight, v_rows, col, n); break;
          case 4: accumulate_chunk_exact<4>(acc_h + col, rescale, weight, v_rows, col, n); break;
          case 3: accumulate_chunk_exact<3>(acc_h + col, rescale, weight, v_rows, col, n); break;
          case 2: accumulate_chunk_exact<2>(acc_h + col, rescale, weight, v_rows, col, n); break;
          case 1: accumulate_chunk_exact<1>(acc_h + col, rescale, weight, v_rows, col, n); break;
          default: break;
        }
      }
    }
    for (int h = 0; h < group; ++h) write_head(a, g * group + h, softmax[h], acc.data() + size_t(h) * d);
  }
}

}  // namespace

void paged_attention_exact(const PagedAttentionArgs& a) {
  check_paged_attention_args(a);
  if (a.ctx_begin != 0 || a.partial_max)
    fail("paged attention: the exact kernel attends the whole context in one part");
  if (a.head_dim % 8 == 0 && coded_row_avx2_available(a.k.format) && coded_row_avx2_available(a.v.format)) {
    attention_exact_avx2_impl(a);
  } else {
    attention_scalar_loop(a, decode_coded_row_scalar);
  }
}

bool paged_attention_fast_avx2_available(const PagedAttentionArgs& a) {
  return coded_row_avx2_available(a.k.format) && coded_row_avx2_available(a.v.format) && a.head_dim % 8 == 0;
}

void paged_attention_fast_avx2(const PagedAttentionArgs& a) {
  check_paged_attention_args(a);
  if (!paged_attention_fast_avx2_available(a)) {
    fail("paged attention: the AVX2 kernel needs an AVX2+FMA+F16C CPU and head_dim % 8 == 0 (head_dim {})",
         a.head_dim);
  }
  attention_avx2_impl(a);
}

void paged_attention_fast(const PagedAttentionArgs& a) {
  if (paged_attention_fast_avx512_available(a)) {
    paged_attention_fast_avx512(a);
  } else if (paged_attention_fast_avx2_available(a)) {
    paged_attention_fast_avx2(a);
  } else {
    paged_attention_exact_scalar(a);
  }
}

#else  // !TQ_HAVE_X86

void paged_attention_exact(const PagedAttentionArgs& a) {
  if (a.ctx_begin != 0 || a.partial_max)
    fail("paged attention: the exact kernel attends the whole context in one part");
  paged_attention_exact_scalar(a);
}

bool paged_attention_fast_avx2_available(const PagedAttentionArgs&) { return false; }

void paged_attention_fast_avx2(const PagedAttentionArgs& a) {
  check_paged_attention_args(a);
  fail("paged attention: the AVX2 kernel is not built for this architecture");
}

void paged_attention_fast(const PagedAttentionArgs& a) { paged_attention_exact_scalar(a); }

#endif

}  // namespace tq
