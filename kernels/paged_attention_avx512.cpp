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
// Several query tokens of one sequence (a prefill chunk's) walk the same tiles together, each tile
// decoded once for all of them: a query's arithmetic is the same as in a call of its own.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "errors/error.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_rows.h"
#include "kernels/tq_key_scores.h"
#include "kernels/tq_value_sums.h"

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

// Where row t of a query's context comes from: 0 the coded pages, 1 the window pages, 2 its
// exact chunk rows.
inline int row_source(const PagedAttentionArgs& a, int t) {
  if (a.exact_from >= 0 && t >= a.exact_from) return 2;
  return in_window(a, t) ? 1 : 0;
}

// Whether query a reads rows t0 .. t0 + n - 1 exactly as `ref` does (the same pages or the same
// exact rows), so that ref's decoded tile serves it.
inline bool reads_as(const PagedAttentionArgs& a, const PagedAttentionArgs& ref, int t0, int n) {
  if (a.exact_from == ref.exact_from && a.exact_k == ref.exact_k && a.exact_v == ref.exact_v &&
      a.windows == ref.windows && (!a.windows || (a.coded_begin == ref.coded_begin && a.coded_end == ref.coded_end)))
    return true;
  for (int t = t0; t < t0 + n; ++t) {
    const int source = row_source(a, t);
    if (source != row_source(ref, t)) return false;
    if (source == 2 && (a.exact_from != ref.exact_from || a.exact_k != ref.exact_k || a.exact_v != ref.exact_v))
      return false;
  }
  return true;
}

// Whether query a reads rows t0 .. t0 + n - 1 all from the coded pages `k` (no window, no exact
// row): what its integer key scores need.
inline bool coded_tile(const PagedAttentionArgs& a, int t0, int n) {
  return (a.exact_from < 0 || t0 + n <= a.exact_from) && (!a.windows || (t0 >= a.coded_begin && t0 + n <= a.coded_end));
}

// int8_levels, kept for the last two tables this thread saw (a cache's key and value codebooks):
// it is asked per call, that is per layer, part and side, for the same few tables, and its
// rounding showed in decode profiles (~1 %). Compared by content, so a table that changes or
// moves is simply computed again.
Int8Levels int8_levels_of_last(const CodedRowFormat& f) {
  struct Entry {
    int count = 0;
    float levels[512];
    Int8Levels result;
  };
  thread_local Entry entries[2];
  thread_local int next = 0;
  const int count = f.codec == RowCodec::TQ_PAIRS ? 512 : 1 << f.bits;
  for (const Entry& e : entries)
    if (e.count == count && std::memcmp(e.levels, f.levels, sizeof(float) * size_t(count)) == 0) return e.result;
  Entry& e = entries[next];
  next ^= 1;
  e.result = int8_levels_of(f);
  e.count = count;
  std::memcpy(e.levels, f.levels, sizeof(float) * size_t(count));
  return e.result;
}

// Queries q[0 .. n_queries) of one sequence (same pages, heads and ctx_begin; any n_ctx), each
// with exactly the arithmetic it gets alone: per KV head the context is walked in the same tiles,
// decoded once for every query that reads the tile's rows as the longest one does (the others,
// near a window's edge, decode their own), and each query's heads score and accumulate the tile
// in the same order as in a call of their own. Rows of the shared tile past a shorter query's end
// are real rows where its own tile would hold zeros: they only reach score lanes that are set to
// -inf, and no V accumulation, so the result is the same bits.
TQ_AVX512 void attention_avx512_impl(const PagedAttentionArgs* queries, int n_queries) {
  const PagedAttentionArgs* longest = queries;
  for (int j = 1; j < n_queries; ++j)
    if (queries[j].n_ctx > longest->n_ctx) longest = queries + j;
  const PagedAttentionArgs& ref = *longest;
  const int d = ref.head_dim;
  const int group = ref.n_q_heads / ref.n_kv_heads;
  alignas(64) float k_rows[kTile * kMaxHeadDim], v_rows[kTile * kMaxHeadDim];  // [16, d] each: the shared tile
  alignas(64) float own_k[kTile * kMaxHeadDim], own_v[kTile * kMaxHeadDim];    // [16, d] each: a query's own
  alignas(64) float p[kMaxGroup * kTile];                                       // [group, 16]
  float correction[kMaxGroup];
  bool rescale[kMaxGroup];
  // Per-thread buffers, grown to the largest call: a decode step calls the kernel once per part
  // and KV head range of every layer, and a heap allocation per buffer per call showed in profiles.
  thread_local std::vector<OnlineSoftmax> softmax;  // [n_queries, group]
  // The softmax sums per lane: a tile's 16 weights are added lane by lane (one add, not a
  // horizontal sum per head and tile), and the 16 lanes summed once, at the end.
  thread_local std::vector<float> lane_sums;  // [n_queries, group, 16]
  thread_local std::vector<float> acc;              // [n_queries, group, d]
  softmax.resize(size_t(n_queries) * group);
  lane_sums.resize(size_t(n_queries) * group * kTile);
  acc.resize(size_t(n_queries) * group * d);
  // Integer key scores (PagedAttentionArgs::int8_key_scores): per query, its group's heads in int8
  // and their factors; a query with a non-finite value in a head is scored in fp32.
  // tq4p points out of the mirror layout the AVX-512 kernels read (kernels/tq_pair_codes.h) take
  // the fp32 paths; the engine's codebook is always in it.
  const bool int8_scores_format =
      ref.int8_key_scores && tq_key_scores_format(ref.k.format) && tq_key_scores_avx512_available(ref.k.format);
  const Int8Levels levels8 = int8_scores_format ? int8_levels_of_last(ref.k.format) : Int8Levels{};
  const bool int8_scores = int8_scores_format && (ref.k.format.codec != RowCodec::TQ_PAIRS || levels8.pairs_mirrored);
  thread_local std::vector<int8_t> q8;          // [n_queries, group, d]
  thread_local std::vector<float> factor;       // [n_queries, group]
  thread_local std::vector<int32_t> q_sum;      // [n_queries, group]
  thread_local std::vector<char> int8_query;    // [n_queries]
  if (int8_scores) {
    q8.resize(size_t(n_queries) * group * d);
    factor.resize(size_t(n_queries) * group);
    q_sum.resize(size_t(n_queries) * group);
  }
  int8_query.assign(n_queries, 0);
  // Integer value sums (PagedAttentionArgs::int8_value_sums) for the tiles a query reads wholly
  // from the coded pages; a tile whose weights cannot be rounded to bytes is summed in fp32.
  const bool int8_sums_format =
      ref.int8_value_sums && tq_value_sums_format(ref.v.format) && tq_value_sums_avx512_available();
  const Int8Levels value_levels8 = int8_sums_format ? int8_levels_of_last(ref.v.format) : Int8Levels{};
  const bool int8_sums = int8_sums_format && (ref.v.format.codec != RowCodec::TQ_PAIRS || value_levels8.pairs_mirrored);
  float kept[kMaxGroup];  // [group]: what a head's accumulator is multiplied by before a tile's sum
  static_assert(kMaxGroup <= kInt8SumMaxHeads);
  // ref's tile of value rows as the summer reads them. A query shorter than ref reads it too: the
  // rows past its end (in the pages, possibly not yet written) get weight 0.
  thread_local TqValueTile value_tile;
  alignas(64) float s8[kMaxGroup * kTile];                                  // [group, 16]
  const uint8_t* key_rows[kTile];
  const uint8_t* value_rows[kTile];
  for (int g = ref.kv_head_begin; g < kv_head_end(ref); ++g) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(softmax.begin(), softmax.end(), OnlineSoftmax{});
    std::fill(lane_sums.begin(), lane_sums.end(), 0.0f);
    for (int j = 0; int8_scores && j < n_queries; ++j) {
      const PagedAttentionArgs& a = queries[j];
      bool ok = a.int8_key_scores;
      for (int h = 0; ok && h < group; ++h) {
        const size_t at = size_t(j) * group + h;
        float q_scale;
        ok = quantize_query_int8_avx512(a.q + (size_t(g) * group + h) * d, d, q8.data() + at * d, &q_scale, &q_sum[at]);
        factor[at] = int8_score_factor(q_scale, levels8, a.scale);
      }
      int8_query[j] = ok;
    }
    for (int t0 = ref.ctx_begin; t0 < ref.n_ctx; t0 += kTile) {
      const int n_ref = std::min(kTile, ref.n_ctx - t0);
      // The tile kPrefetchDistance ahead, past this head's last one the next head's first ones.
      const int ahead = (t0 - ref.ctx_begin + kPrefetchDistance) / kTile, head_tiles = (ref.n_ctx - ref.ctx_begin + kTile - 1) / kTile;
      if (ahead < head_tiles) {
        prefetch_tile(ref, true, t0 + kPrefetchDistance, kTile, g);
        prefetch_tile(ref, false, t0 + kPrefetchDistance, kTile, g);
      } else if (g + 1 < kv_head_end(ref) && ahead - head_tiles < head_tiles) {
        const int next = ref.ctx_begin + (ahead - head_tiles) * kTile;
        prefetch_tile(ref, true, next, kTile, g + 1);
        prefetch_tile(ref, false, next, kTile, g + 1);
      }
      bool k_decoded = false;  // k_rows holds ref's tile: decoded when a query first scores it in fp32
      bool v_decoded = false;  // v_rows likewise, when a query first sums it in fp32
      bool v_laid_out = false;  // value_tile holds ref's tile: laid out when a query first sums it in int8
      if (int8_scores) row_ptrs(ref, ref.k, t0, n_ref, g, key_rows);
      if (int8_sums) row_ptrs(ref, ref.v, t0, n_ref, g, value_rows);
      for (int j = 0; j < n_queries; ++j) {
        const PagedAttentionArgs& a = queries[j];
        if (t0 >= a.n_ctx) continue;
        const int n = std::min(kTile, a.n_ctx - t0);
        const bool coded = coded_tile(a, t0, n);
        const bool int8_tile = int8_query[j] && coded;
        const bool own_tile = &a != &ref && !reads_as(a, ref, t0, n);
        const float* tile_k = k_rows;
        if (own_tile) {
          if (!int8_tile) {
            load_tile(a, true, t0, n, g, own_k, d, decode_rows_widest);
            std::fill(own_k + size_t(n) * d, own_k + size_t(kTile) * d, 0.0f);
            tile_k = own_k;
          }
        } else if (!int8_tile && !k_decoded) {
          load_tile(ref, true, t0, n_ref, g, k_rows, d, decode_rows_widest);
          std::fill(k_rows + size_t(n_ref) * d, k_rows + size_t(kTile) * d, 0.0f);  // a short last tile
          k_decoded = true;
        }
        if (int8_tile) {
          const size_t at = size_t(j) * group;
          tq_key_scores_avx512(ref.k.format, key_rows, n, q8.data() + at * d, q_sum.data() + at, factor.data() + at, group,
                                levels8, s8);
        }
        const float* q_group = a.q + size_t(g) * group * d;
        OnlineSoftmax* sm = softmax.data() + size_t(j) * group;
        float* acc_j = acc.data() + size_t(j) * group * d;
        for (int h = 0; h < group; ++h) {
          const __m512 s =
              int8_tile ? _mm512_load_ps(s8 + h * kTile) : tile_scores(q_group + size_t(h) * d, tile_k, n, d, a.scale);
          // The whole tile's maximum at once (from -inf: a rescale by 0, of nothing).
          const Rescale r = raise_max(sm[h], _mm512_reduce_max_ps(s));
          rescale[h] = r.needed;
          correction[h] = r.correction;
          const __m512 w = exp_nonpositive(_mm512_sub_ps(s, _mm512_set1_ps(sm[h].max)));
          _mm512_store_ps(p + h * kTile, w);
          float* sums = lane_sums.data() + (size_t(j) * group + h) * kTile;
          __m512 sum = _mm512_loadu_ps(sums);
          if (r.needed) sum = _mm512_mul_ps(sum, _mm512_set1_ps(r.correction));
          _mm512_storeu_ps(sums, _mm512_add_ps(sum, w));
        }
        if (int8_sums && a.int8_value_sums && coded) {
          for (int h = 0; h < group; ++h) kept[h] = rescale[h] ? correction[h] : 1.0f;
          if (!v_laid_out) {
            tq_value_tile_avx512(ref.v.format, value_rows, n_ref, value_levels8, &value_tile);
            v_laid_out = true;
          }
          if (tq_value_sums_avx512(value_tile, n, p, kept, group, value_levels8, acc_j)) continue;
        }
        const float* tile_v = v_rows;
        if (own_tile) {
          load_tile(a, false, t0, n, g, own_v, d, decode_rows_widest);
          tile_v = own_v;
        } else if (!v_decoded) {
          load_tile(ref, false, t0, n_ref, g, v_rows, d, decode_rows_widest);
          v_decoded = true;
        }
        for (int h = 0; h < group; h += kHeadsPerPass) {
          float* acc_h = acc_j + size_t(h) * d;
          const float* p_h = p + h * kTile;
          switch (std::min(kHeadsPerPass, group - h)) {
            case 4: accumulate_heads<4>(acc_h, d, rescale + h, correction + h, p_h, tile_v, n); break;
            case 3: accumulate_heads<3>(acc_h, d, rescale + h, correction + h, p_h, tile_v, n); break;
            case 2: accumulate_heads<2>(acc_h, d, rescale + h, correction + h, p_h, tile_v, n); break;
            default: accumulate_heads<1>(acc_h, d, rescale + h, correction + h, p_h, tile_v, n); break;
          }
        }
      }
    }
    for (int j = 0; j < n_queries; ++j)
      for (int h = 0; h < group; ++h) {
        const size_t at = size_t(j) * group + h;
        softmax[at].sum = _mm512_reduce_add_ps(_mm512_loadu_ps(lane_sums.data() + at * kTile));
        write_head(queries[j], g * group + h, softmax[at], acc.data() + at * d);
      }
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
  attention_avx512_impl(&a, 1);
}

void paged_attention_fast_avx512_queries(const PagedAttentionArgs* queries, int n_queries) {
  for (int j = 0; j < n_queries; ++j) {
    const PagedAttentionArgs& a = queries[j];
    check_paged_attention_args(a);
    if (!paged_attention_fast_avx512_available(a)) {
      fail("paged attention: the AVX-512 kernel needs an AVX-512F+FMA+F16C CPU and head_dim % 16 == 0 (head_dim {})",
           a.head_dim);
    }
    check_same_sequence(queries[0], a);
  }
  if (n_queries > 0) attention_avx512_impl(queries, n_queries);
}

}  // namespace tq

#else  // !x86

namespace tq {

bool paged_attention_fast_avx512_available(const PagedAttentionArgs&) { return false; }

void paged_attention_fast_avx512(const PagedAttentionArgs& a) {
  check_paged_attention_args(a);
  fail("paged attention: the AVX-512 kernel is not built for this architecture");
}

void paged_attention_fast_avx512_queries(const PagedAttentionArgs*, int) {
  fail("paged attention: the AVX-512 kernel is not built for this architecture");
}

}  // namespace tq

#endif
