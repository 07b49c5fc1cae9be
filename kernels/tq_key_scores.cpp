// Integer scores of 2-, 3- and 4-bit TurboQuant key rows (kernels/tq_key_scores.h): the scalar reference and
// the AVX-512 VNNI scorer, which gives its results bit for bit (the dot products are exact
// integers; the fp32 scaling is the same two products in the same order).
#include "kernels/tq_key_scores.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "errors/error.h"
#include "kernels/tq_low_bit_codes.h"
#include "kernels/tq_packing.h"
#include "kernels/tq_pair_codes.h"
#include "kernels/tq_row_scales.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's 512-bit broadcast, insert and unpack intrinsics pass an undefined vector as the unused
// merge source, which -W(maybe-)uninitialized reports once they are inlined under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace tq {
namespace {

// Nearest, ties to even (the default rounding mode, as cvtps2dq rounds).
int8_t round_to_int8(float x) { return static_cast<int8_t>(std::clamp(std::nearbyint(x), -127.0f, 127.0f)); }

}  // namespace

Int8Levels int8_levels(const float* levels, int count) {
  if (count < 1 || count > 16) fail("int8 levels: {} levels (1 to 16)", count);
  Int8Levels out;
  float top = 0;
  for (int k = 0; k < count; ++k) top = std::max(top, std::fabs(levels[k]));
  out.scale = top / 127.0f;
  for (int k = 0; k < count; ++k) out.c8[k] = top > 0 ? round_to_int8(levels[k] / out.scale) : 0;
  return out;
}

Int8Levels int8_pair_levels(const float* points) {
  Int8Levels out;
  float top = 0;
  for (int k = 0; k < 512; ++k) top = std::max(top, std::fabs(points[k]));
  out.scale = top / 127.0f;
  for (int k = 0; k < 256; ++k) {
    out.px[k] = top > 0 ? round_to_int8(points[2 * k] / out.scale) : 0;
    out.py[k] = top > 0 ? round_to_int8(points[2 * k + 1] / out.scale) : 0;
  }
  out.pairs_mirrored = true;
  for (int k = 0; k < 256; ++k) {
    const int m = 192 + k % 64;
    const bool x_positive = k & 128, y_positive = k & 64;
    out.pairs_mirrored = out.pairs_mirrored && out.px[m] > 0 && out.py[m] > 0 &&
                         out.px[k] == (x_positive ? out.px[m] : -out.px[m]) && out.py[k] == (y_positive ? out.py[m] : -out.py[m]);
  }
  return out;
}

Int8Levels int8_levels_of(const CodedRowFormat& f) {
  if (!f.levels) fail("int8 levels: the row format has no codebook");
  return f.codec == RowCodec::TQ_PAIRS ? int8_pair_levels(f.levels) : int8_levels(f.levels, 1 << f.bits);
}

bool quantize_query_int8(const float* q, int d, int8_t* q8, float* scale, int32_t* sum) {
  float top = 0;
  for (int j = 0; j < d; ++j) {
    if (!std::isfinite(q[j])) return false;
    top = std::max(top, std::fabs(q[j]));
  }
  const float inverse = top > 0 ? 127.0f / top : 0.0f;
  if (!std::isfinite(inverse)) return false;  // top below 127 / FLT_MAX: scored in fp32
  *scale = top / 127.0f;
  *sum = 0;
  for (int j = 0; j < d; ++j) {
    q8[j] = round_to_int8(q[j] * inverse);
    *sum += q8[j];
  }
  return true;
}

bool tq_key_scores_format(const CodedRowFormat& f) {
  const bool codes = (f.codec == RowCodec::TQ && f.bits >= 2 && f.bits <= 4) || (f.codec == RowCodec::TQ_PAIRS && f.bits == 4 && f.f16_scale);
  return codes && (f.dim == 64 || f.dim == 128 || f.dim == 256 || f.dim == 512) && f.levels != nullptr;
}

float tq_key_score_scalar(const CodedRowFormat& f, const uint8_t* row, const int8_t* q8, float factor,
                           const Int8Levels& levels) {
  if (!tq_key_scores_format(f))
    fail("tq key scores: rows of {} bits at head_dim {} are not scored here (TurboQuant, 2-4 bits, head_dim 64-512)",
         f.bits, f.dim);
  int32_t dot = 0;
  if (f.codec == RowCodec::TQ_PAIRS) {
    const int h = f.dim / 2;
    for (int c = 0; c < h; ++c) dot += int32_t{levels.px[row[c]]} * q8[c] + int32_t{levels.py[row[c]]} * q8[c + h];
  } else {
    uint8_t idx[512];
    unpack_indices(row, f.dim, f.bits, idx);
    for (int c = 0; c < f.dim; ++c) dot += int32_t{levels.c8[idx[c]]} * q8[c];
  }
  return static_cast<float>(dot) * factor * tq_rows::row_scale(f, row);
}

#if defined(__x86_64__) || defined(__i386__)

namespace {

#define TQ_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,f16c")))

// quantize_query_int8, 16 lanes at a time (d % 16 == 0): the same maximum, product and rounding.
TQ_VNNI bool quantize_avx512(const float* q, int d, int8_t* q8, float* scale, int32_t* sum) {
  __m512 top = _mm512_setzero_ps();
  __mmask16 finite = 0xFFFF;
  const __m512 infinity = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  for (int j = 0; j < d; j += 16) {
    const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(q + j));
    finite &= _mm512_cmp_ps_mask(a, infinity, _CMP_LT_OQ);  // false for inf and NaN
    top = _mm512_max_ps(top, a);
  }
  if (finite != 0xFFFF) return false;
  const float t = _mm512_reduce_max_ps(top);
  const float inverse_value = t > 0 ? 127.0f / t : 0.0f;
  if (!std::isfinite(inverse_value)) return false;
  *scale = t / 127.0f;
  const __m512 inverse = _mm512_set1_ps(inverse_value);
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  __m512i total = _mm512_setzero_si512();
  for (int j = 0; j < d; j += 16) {
    const __m512 x = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(q + j), inverse), lo), hi);
    const __m512i v = _mm512_cvtps_epi32(x);
    total = _mm512_add_epi32(total, v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q8 + j), _mm512_cvtepi32_epi8(v));
  }
  *sum = _mm512_reduce_add_epi32(total);
  return true;
}

// Lane i = the sum of the 4 lanes of row i, where row 4g + q is 128-bit lane q of v[g]: the
// transposing reduction leaves row 4g + q in lane 4q + g, which one permutation puts right.
TQ_VNNI __m512i row_sums_of_groups(const __m512i v[4]) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[0], v[1]), _mm512_unpackhi_epi32(v[0], v[1]));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2], v[3]), _mm512_unpackhi_epi32(v[2], v[3]));
  const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
  const __m512i row_order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(row_order, u);
}

// The levels as unsigned bytes c8 + 128 in each 128-bit lane, for vpshufb (vpdpbusd multiplies
// unsigned by signed bytes); each head's dot product then exceeds the signed one by
// 128 * sum_j q8[j], which store_scores takes off.
TQ_VNNI inline __m512i biased_level_table(const Int8Levels& levels) {
  alignas(16) uint8_t table[16];
  for (int k = 0; k < 16; ++k) table[k] = static_cast<uint8_t>(levels.c8[k] + 128);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
}

// One head's 16 scores from its two accumulators per group of 4 rows (dot products against the
// table bytes): the rows' sums, the offset 128 * sum_j q8[j] taken off, then the head's factor and
// each row's scale (-inf past n).
TQ_VNNI inline void store_scores(const __m512i acc[2][4], int32_t q_sum, float factor, __m512 row_scale,
                                 __mmask16 live, float* out) {
  __m512i sums[4];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) sums[g] = _mm512_add_epi32(acc[0][g], acc[1][g]);
  const __m512i dot = _mm512_sub_epi32(row_sums_of_groups(sums), _mm512_set1_epi32(128 * q_sum));
  const __m512 s = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(factor)), row_scale);
  _mm512_storeu_ps(out, _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), live, s));
}

// The heads' scores of a tile whose codes are table bytes: codes[u][0 / 1][g] covers coordinates
// 16u + [0, 16) and d/2 + 16u + [0, 16) of group g's 4 rows (row q in lane q). Per head, the
// query's 16 coordinates of each broadcast to the 4 lanes and one vpdpbusd per group, run and
// half, into two accumulators per group (two dependency chains), summed per row at the end.
template <int CHUNKS>
TQ_VNNI __attribute__((always_inline)) inline void score_heads(const __m512i codes[2 * CHUNKS][2][4], const CodedRowFormat& f,
                                                               const uint8_t* const rows[kInt8ScoreTile], int n, const int8_t* q8,
                                                               const int32_t* q_sum, const float* factor, int heads, float* scores) {
  constexpr int d = 64 * CHUNKS, half = d / 2;
  const __m512 row_scale_v = tq_rows::row_scales_avx512(f, rows, n);
  const __mmask16 live = n >= kInt8ScoreTile ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  for (int h = 0; h < heads; ++h) {
    const int8_t* qh = q8 + size_t(h) * d;
    __m512i acc[2][4];
#pragma GCC unroll 2
    for (int e = 0; e < 2; ++e)
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) acc[e][g] = _mm512_setzero_si512();
#pragma GCC unroll 16
    for (int u = 0; u < 2 * CHUNKS; ++u)
#pragma GCC unroll 2
      for (int hi = 0; hi < 2; ++hi) {
        const __m512i qv =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + hi * half + 16 * u)));
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) acc[hi][g] = _mm512_dpbusd_epi32(acc[hi][g], codes[u][hi][g], qv);
      }
    store_scores(acc, q_sum[h], factor[h], row_scale_v, live, scores + size_t(h) * kInt8ScoreTile);
  }
}

// CHUNKS = d / 64: chunk c is code bytes [32c, 32c + 32) of a row, whose low nibbles are
// coordinates 32c .. 32c + 31 and high nibbles d/2 + 32c .. (kernels/tq_packing.h). The tile's
// rows go in 4 groups of 4, a group's 16-byte runs in the 128-bit lanes (row q in lane q), each
// run's low and high nibbles made table bytes once, then score_heads.
template <int CHUNKS>
TQ_VNNI void scores_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8ScoreTile], int n,
                           const int8_t* q8, const int32_t* q_sum, const float* factor, int heads,
                           const Int8Levels& levels, float* scores) {
  const tq_rows::TileRows tile_rows = tq_rows::rows_or_zero(rows, n);
  const uint8_t* const* r = tile_rows.r;
  const __m512i lut = biased_level_table(levels);
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // codes[u][0 / 1][g]: run u (code bytes [16u, 16u + 16)) of group g's rows, low and high nibbles
  // (coordinates 16u + [0, 16) and d/2 + 16u + [0, 16)), as table bytes.
  __m512i codes[2 * CHUNKS][2][4];
#pragma GCC unroll 16
  for (int u = 0; u < 2 * CHUNKS; ++u)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i x = tq_low_bits::lanes16(r + 4 * g, 16 * u);
      codes[u][0][g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(x, nibble));
      codes[u][1][g] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(x, 4), nibble));
    }
  score_heads<CHUNKS>(codes, f, rows, n, q8, q_sum, factor, heads, scores);
}

// tq4p rows: the 4-bit scorer with each code byte looked up twice (kernels/tq_pair_codes.h), its
// point's x for coordinate c and its y for d/2 + c (the coordinates of a 4-bit byte's nibbles).
#define TQ_VNNI_VBMI __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi,f16c")))
template <int CHUNKS>
TQ_VNNI_VBMI void scores_pairs_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8ScoreTile], int n,
                                      const int8_t* q8, const int32_t* q_sum, const float* factor, int heads,
                                      const Int8Levels& levels, float* scores) {
  const tq_rows::TileRows tile_rows = tq_rows::rows_or_zero(rows, n);
  const uint8_t* const* r = tile_rows.r;
  const tq_pair_codes::Table x_table = tq_pair_codes::load_table(levels.px, 7);
  const tq_pair_codes::Table y_table = tq_pair_codes::load_table(levels.py, 6);
  __m512i codes[2 * CHUNKS][2][4];
#pragma GCC unroll 16
  for (int u = 0; u < 2 * CHUNKS; ++u)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i x = tq_low_bits::lanes16(r + 4 * g, 16 * u);
      codes[u][0][g] = tq_pair_codes::lookup<128>(x_table, x);
      codes[u][1][g] = tq_pair_codes::lookup<128>(y_table, x);
    }
  score_heads<CHUNKS>(codes, f, rows, n, q8, q_sum, factor, heads, scores);
}

// 2 and 3 bits, RUNS = d / 64 runs of 16 code bytes (kernels/tq_low_bit_codes.h): the tile's rows
// in 4 groups of 4, each group's indices of coordinates 16u + k*d/4 + [0, 16) made table bytes
// once; per head, the query's same 16 coordinates broadcast to the 4 lanes and one vpdpbusd per
// group, run and k.
template <int BITS, int RUNS>
TQ_VNNI void scores_low_bits_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8ScoreTile], int n,
                                    const int8_t* q8, const int32_t* q_sum, const float* factor, int heads,
                                    const Int8Levels& levels, float* scores) {
  constexpr int d = 64 * RUNS, quarter = d / 4;
  const tq_rows::TileRows tile_rows = tq_rows::rows_or_zero(rows, n);
  const uint8_t* const* r = tile_rows.r;
  const __m512i lut = biased_level_table(levels);
  __m512i codes[RUNS][4][4];  // [run][k][group]
#pragma GCC unroll 8
  for (int u = 0; u < RUNS; ++u)
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const tq_low_bits::Run run = tq_low_bits::load_run<BITS>(r + 4 * g, 16 * u, d);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) codes[u][k][g] = _mm512_shuffle_epi8(lut, tq_low_bits::indices<BITS>(run, k));
    }
  const __m512 row_scale_v = tq_rows::row_scales_avx512(f, rows, n);
  const __mmask16 live = n >= kInt8ScoreTile ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  for (int h = 0; h < heads; ++h) {
    const int8_t* qh = q8 + size_t(h) * d;
    __m512i acc[2][4];  // [k % 2][group]: two dependency chains per group
#pragma GCC unroll 2
    for (int e = 0; e < 2; ++e)
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) acc[e][g] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int u = 0; u < RUNS; ++u)
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512i qv =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qh + k * quarter + 16 * u)));
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) acc[k % 2][g] = _mm512_dpbusd_epi32(acc[k % 2][g], codes[u][k][g], qv);
      }
    store_scores(acc, q_sum[h], factor[h], row_scale_v, live, scores + size_t(h) * kInt8ScoreTile);
  }
}

template <int BITS>
TQ_VNNI void scores_low_bits_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8ScoreTile], int n,
                                    const int8_t* q8, const int32_t* q_sum, const float* factor, int heads,
                                    const Int8Levels& levels, float* scores) {
  switch (f.dim) {
    case 64: return scores_low_bits_avx512<BITS, 1>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
    case 128: return scores_low_bits_avx512<BITS, 2>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
    case 256: return scores_low_bits_avx512<BITS, 4>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
    default: return scores_low_bits_avx512<BITS, 8>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
  }
}

}  // namespace

bool tq_key_scores_avx512_available() {
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("f16c");
  return cpu;
}

bool tq_key_scores_avx512_available(const CodedRowFormat& f) {
  static const bool vbmi = __builtin_cpu_supports("avx512vbmi");
  return tq_key_scores_avx512_available() && (f.codec != RowCodec::TQ_PAIRS || vbmi);
}

void tq_key_scores_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8ScoreTile], int n,
                           const int8_t* q8, const int32_t* q_sum, const float* factor, int heads,
                           const Int8Levels& levels, float* scores) {
  if (f.codec == RowCodec::TQ_PAIRS) {
    if (!levels.pairs_mirrored) fail("tq key scores: the tq4p points are not in the mirror-symmetric layout the AVX-512 scorer reads");
    switch (f.dim) {
      case 64: return scores_pairs_avx512<1>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
      case 128: return scores_pairs_avx512<2>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
      case 256: return scores_pairs_avx512<4>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
      default: return scores_pairs_avx512<8>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
    }
  }
  if (f.bits == 2) return scores_low_bits_avx512<2>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
  if (f.bits == 3) return scores_low_bits_avx512<3>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
  switch (f.dim) {
    case 64: return scores_avx512<1>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
    case 128: return scores_avx512<2>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
    case 256: return scores_avx512<4>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
    default: return scores_avx512<8>(f, rows, n, q8, q_sum, factor, heads, levels, scores);
  }
}

bool quantize_query_int8_avx512(const float* q, int d, int8_t* q8, float* scale, int32_t* sum) {
  if (!tq_key_scores_avx512_available() || d % 16 != 0) fail("int8 query: needs an AVX-512 VNNI CPU and d % 16 == 0");
  return quantize_avx512(q, d, q8, scale, sum);
}

#else

bool tq_key_scores_avx512_available() { return false; }
bool tq_key_scores_avx512_available(const CodedRowFormat&) { return false; }

bool quantize_query_int8_avx512(const float*, int, int8_t*, float*, int32_t*) {
  fail("int8 query: the AVX-512 quantizer is not built for this architecture");
}

void tq_key_scores_avx512(const CodedRowFormat&, const uint8_t* const*, int, const int8_t*, const int32_t*,
                           const float*, int, const Int8Levels&, float*) {
  fail("tq key scores: the AVX-512 scorer is not built for this architecture");
}

#endif

}  // namespace tq
