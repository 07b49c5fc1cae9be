// The AVX-512 attention kernel (kernels/paged_attention.h: paged_attention_fast_avx512). Its
// functions carry their own target attribute; the file is compiled for the baseline ISA, so the
// shared inline helpers of kernels/paged_attention_rows.h are the same code in every file.
//
// Per KV head the context is walked in tiles of 16 positions, aligned to ctx_begin (a part's
// first position, so a tile never depends on what else is computed): the tile's K and V rows are
// decoded once into fp32 (row-major, head_dim apart), each query head of the group scores the 16
// rows (one 16-lane FMA chain per row, then a 16-to-1 transposing reduction, so lane i holds
// row i's score), the tile's weights are exp'd 16 at a time, and the weighted V rows are added
// into the group's accumulators, held in registers for up to 4 heads x 64 columns at once.
#include <algorithm>
#include <limits>
#include <vector>

#include "errors/error.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_rows.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's 512-bit unpack and shuffle intrinsics pass _mm512_undefined_ps() as the unused merge
// source, which -Wmaybe-uninitialized reports once they are inlined under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace tq {
namespace {

using namespace attention_detail;

#define TQ_AVX512 __attribute__((target("avx512f,fma,f16c")))
#define TQ_AVX512_INLINE __attribute__((target("avx512f,fma,f16c"), always_inline)) inline

constexpr int kTile = 16;
constexpr int kColumnVectors = 4;  // accumulator columns per pass: 4 vectors of 16
constexpr int kHeadsPerPass = 4;   // query heads whose accumulators are held at once
constexpr int kPrefetchDistance = 2 * kTile;  // positions ahead whose rows are prefetched

// exp(x) in 16 lanes for x <= 0: the AVX2 kernel's range reduction and Cephes polynomial, with
// 2^n applied by scalef; below -87.3 (and -inf) it gives 0.
TQ_AVX512_INLINE __m512 exp_nonpositive(__m512 x) {
  const __m512 lowest = _mm512_set1_ps(-87.3f);
  const __mmask16 live = _mm512_cmp_ps_mask(x, lowest, _CMP_GE_OQ);
  x = _mm512_max_ps(x, lowest);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(live, _mm512_scalef_ps(y, n));
}

// Within each 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
TQ_AVX512_INLINE __m512 sum_pairs(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
}

// Rows 4k..4k+3's partial sums, one per 128-bit lane, from sum_pairs of rows (4k, 4k+1) and
// (4k+2, 4k+3).
TQ_AVX512_INLINE __m512 sum_quads(__m512 ab, __m512 cd) {
  const __m512d x = _mm512_castps_pd(ab), y = _mm512_castps_pd(cd);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
}

// The 128-bit lanes of u and w added in pairs: [u0 + u1, u2 + u3, w0 + w1, w2 + w3].
TQ_AVX512_INLINE __m512 sum_lanes(__m512 u, __m512 w) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(u, w, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(u, w, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Lane i = the sum of v[i]'s 16 lanes.
TQ_AVX512_INLINE __m512 transpose_sums(const __m512 v[16]) {
  __m512 quad[4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k)
    quad[k] = sum_quads(sum_pairs(v[4 * k], v[4 * k + 1]), sum_pairs(v[4 * k + 2], v[4 * k + 3]));
  return sum_lanes(sum_lanes(quad[0], quad[1]), sum_lanes(quad[2], quad[3]));
}

// Scores q . k_rows[i] * scale of a tile's rows (k_rows: [16, d], d % 16 == 0) in lanes 0..15;
// lanes n..15 are -inf (those rows must hold finite values: the caller zeroes them).
TQ_AVX512_INLINE __m512 tile_scores(const float* q, const float* k_rows, int n, int d, float scale) {
  __m512 dot[kTile];
#pragma GCC unroll 16
  for (int i = 0; i < kTile; ++i) dot[i] = _mm512_setzero_ps();
  for (int j = 0; j < d; j += 16) {
    const __m512 qj = _mm512_loadu_ps(q + j);
#pragma GCC unroll 16
    for (int i = 0; i < kTile; ++i) dot[i] = _mm512_fmadd_ps(qj, _mm512_loadu_ps(k_rows + size_t(i) * d + j), dot[i]);
  }
  const __m512 s = _mm512_mul_ps(transpose_sums(dot), _mm512_set1_ps(scale));
  const __mmask16 live = n >= kTile ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), live, s);
}

// For H heads (acc_h = acc + h * d, weights p + h * kTile) and the C vectors of columns from
// `col`: acc = acc * correction[h] (where rescale[h]) + sum_i p[h][i] * v_rows[i], FMA, in row order.
template <int H, int C>
TQ_AVX512_INLINE void accumulate(float* acc, int d, const bool* rescale, const float* correction, const float* p,
                                 const float* v_rows, int col, int n) {
  __m512 r[H][C];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
    const __m512 c = _mm512_set1_ps(rescale[h] ? correction[h] : 1.0f);
#pragma GCC unroll 4
    for (int u = 0; u < C; ++u) {
      r[h][u] = _mm512_loadu_ps(acc + size_t(h) * d + col + 16 * u);
      if (rescale[h]) r[h][u] = _mm512_mul_ps(r[h][u], c);
    }
  }
  for (int i = 0; i < n; ++i) {
    __m512 v[C];
#pragma GCC unroll 4
    for (int u = 0; u < C; ++u) v[u] = _mm512_loadu_ps(v_rows + size_t(i) * d + col + 16 * u);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m512 w = _mm512_set1_ps(p[h * kTile + i]);
#pragma GCC unroll 4
      for (int u = 0; u < C; ++u) r[h][u] = _mm512_fmadd_ps(w, v[u], r[h][u]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int u = 0; u < C; ++u) _mm512_storeu_ps(acc + size_t(h) * d + col + 16 * u, r[h][u]);
}

template <int H>
TQ_AVX512_INLINE void accumulate_heads(float* acc, int d, const bool* rescale, const float* correction, const float* p,
                                       const float* v_rows, int n) {
  int col = 0;
  for (; col + 16 * kColumnVectors <= d; col += 16 * kColumnVectors)
    accumulate<H, kColumnVectors>(acc, d, rescale, correction, p, v_rows, col, n);
  switch ((d - col) / 16) {
    case 3: accumulate<H, 3>(acc, d, rescale, correction, p, v_rows, col, n); break;
    case 2: accumulate<H, 2>(acc, d, rescale, correction, p, v_rows, col, n); break;
    case 1: accumulate<H, 1>(acc, d, rescale, correction, p, v_rows, col, n); break;
    default: break;
  }
}

// A run of rows in one format: the AVX-512 decoders where they serve the format, else the AVX2 ones
// (the same values either way).
void decode_rows_widest(const CodedRowFormat& f, const uint8_t* first, size_t row_stride, int n, float* out,
                        size_t out_stride) {
  if (coded_row_avx512_available(f)) {
    decode_coded_rows_avx512(f, first, row_stride, n, out, out_stride);
  } else {
    decode_coded_rows_avx2(f, first, row_stride, n, out, out_stride);
  }
}

TQ_AVX512 void attention_avx512_impl(const PagedAttentionArgs& a) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  alignas(64) float k_rows[kTile * kMaxHeadDim], v_rows[kTile * kMaxHeadDim];  // [16, d] each
  alignas(64) float p[kMaxGroup * kTile];                                       // [group, 16]
  float correction[kMaxGroup];
  bool rescale[kMaxGroup];
  OnlineSoftmax softmax[kMaxGroup];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  for (int g = a.kv_head_begin; g < kv_head_end(a); ++g) {
    const float* q_group = a.q + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(softmax, softmax + group, OnlineSoftmax{});
    for (int t0 = a.ctx_begin; t0 < a.n_ctx; t0 += kTile) {
      const int n = std::min(kTile, a.n_ctx - t0);
      prefetch_tile(a, true, t0 + kPrefetchDistance, kTile, g);
      prefetch_tile(a, false, t0 + kPrefetchDistance, kTile, g);
      load_tile(a, true, t0, n, g, k_rows, d, decode_rows_widest);
      std::fill(k_rows + size_t(n) * d, k_rows + size_t(kTile) * d, 0.0f);  // a short last tile
      load_tile(a, false, t0, n, g, v_rows, d, decode_rows_widest);
      for (int h = 0; h < group; ++h) {
        const __m512 s = tile_scores(q_group + size_t(h) * d, k_rows, n, d, a.scale);
        // The whole tile's maximum at once (from -inf: a rescale by 0, of nothing).
        const Rescale r = raise_max(softmax[h], _mm512_reduce_max_ps(s));
        rescale[h] = r.needed;
        correction[h] = r.correction;
        const __m512 w = exp_nonpositive(_mm512_sub_ps(s, _mm512_set1_ps(softmax[h].max)));
        _mm512_store_ps(p + h * kTile, w);
        softmax[h].sum = softmax[h].sum * r.correction + _mm512_reduce_add_ps(w);
      }
      for (int h = 0; h < group; h += kHeadsPerPass) {
        float* acc_h = acc.data() + size_t(h) * d;
        const float* p_h = p + h * kTile;
        switch (std::min(kHeadsPerPass, group - h)) {
          case 4: accumulate_heads<4>(acc_h, d, rescale + h, correction + h, p_h, v_rows, n); break;
          case 3: accumulate_heads<3>(acc_h, d, rescale + h, correction + h, p_h, v_rows, n); break;
          case 2: accumulate_heads<2>(acc_h, d, rescale + h, correction + h, p_h, v_rows, n); break;
          default: accumulate_heads<1>(acc_h, d, rescale + h, correction + h, p_h, v_rows, n); break;
        }
      }
    }
    for (int h = 0; h < group; ++h) write_head(a, g * group + h, softmax[h], acc.data() + size_t(h) * d);
  }
}

}  // namespace

bool paged_attention_fast_avx512_available(const PagedAttentionArgs& a) {
  static const bool cpu =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  // Window rows have the same head_dim, so the AVX2 decoders serve them too.
  return cpu && a.head_dim % 16 == 0 && coded_row_avx2_available(a.k.format) && coded_row_avx2_available(a.v.format);
}

void paged_attention_fast_avx512(const PagedAttentionArgs& a) {
  check_paged_attention_args(a);
  if (!paged_attention_fast_avx512_available(a)) {
    fail("paged attention: the AVX-512 kernel needs an AVX-512F+FMA+F16C CPU and head_dim % 16 == 0 (head_dim {})",
         a.head_dim);
  }
  attention_avx512_impl(a);
}

}  // namespace tq

#else  // !x86

namespace tq {

bool paged_attention_fast_avx512_available(const PagedAttentionArgs&) { return false; }

void paged_attention_fast_avx512(const PagedAttentionArgs& a) {
  check_paged_attention_args(a);
  fail("paged attention: the AVX-512 kernel is not built for this architecture");
}

}  // namespace tq

#endif
