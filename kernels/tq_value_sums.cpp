// Integer weighted sums of 2-, 3- and 4-bit TurboQuant value rows (kernels/tq_value_sums.h): the scalar
// reference and the AVX-512 VNNI summer, which gives its results bit for bit (the sums are exact
// integers; the weights' rounding and the fp32 scaling are the same operations in the same order).
#include "kernels/tq_value_sums.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "errors/error.h"
#include "kernels/tq_row_scales.h"
#include "kernels/tq_low_bit_codes.h"
#include "kernels/tq_packing.h"
#include "kernels/tq_pair_codes.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's 512-bit broadcast and insert intrinsics pass an undefined vector as the unused merge
// source, which -W(maybe-)uninitialized reports once they are inlined under a target attribute.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace tq {
namespace {

constexpr int kMaxHeads = kInt8SumMaxHeads;

// One head's weights w_i = p_i * s_i (i < n) as bytes against their largest, and the factor
// their integer sums are scaled by. False for a weight that is negative or not finite, or a
// largest one below 255 / FLT_MAX.
bool quantize_weights(const float* p, const float* s, int n, float level_scale, uint8_t* w8, float* factor) {
  float w[kInt8SumTile];
  float top = 0;
  for (int i = 0; i < n; ++i) {
    w[i] = p[i] * s[i];
    if (!(w[i] >= 0.0f && w[i] < std::numeric_limits<float>::infinity())) return false;
    top = std::max(top, w[i]);
  }
  const float inverse = top > 0 ? 255.0f / top : 0.0f;
  if (!std::isfinite(inverse)) return false;
  for (int i = 0; i < kInt8SumTile; ++i)
    w8[i] = i < n ? static_cast<uint8_t>(std::nearbyint(std::min(w[i] * inverse, 255.0f))) : 0;
  *factor = top > 0 ? top / 255.0f * level_scale : 0.0f;
  return true;
}

void check_heads(int heads) {
  if (heads < 0 || heads > kMaxHeads) fail("tq value sums: {} query heads per KV head (at most {})", heads, kMaxHeads);
}

void check_tile(const CodedRowFormat& f, int n) {
  if (!tq_value_sums_format(f))
    fail("tq value sums: rows of {} bits at head_dim {} are not summed here (TurboQuant, 2-4 bits, head_dim 64-512)",
         f.bits, f.dim);
  if (n < 0 || n > kInt8SumTile) fail("tq value sums: {} rows in a tile (0 to {})", n, kInt8SumTile);
}

}  // namespace

bool tq_value_sums_format(const CodedRowFormat& f) {
  const bool codes = (f.codec == RowCodec::TQ && f.bits >= 2 && f.bits <= 4) || (f.codec == RowCodec::TQ_PAIRS && f.bits == 4 && f.f16_scale);
  return codes && (f.dim == 64 || f.dim == 128 || f.dim == 256 || f.dim == 512) && f.levels != nullptr;
}

bool tq_value_sums_scalar(const CodedRowFormat& f, const uint8_t* const rows[kInt8SumTile], int n, const float* p,
                           const float* correction, int heads, const Int8Levels& levels, float* acc) {
  check_heads(heads);
  check_tile(f, n);
  const int d = f.dim;
  float s[kInt8SumTile] = {};
  for (int i = 0; i < n; ++i) s[i] = tq_rows::row_scale(f, rows[i]);
  uint8_t w8[kMaxHeads][kInt8SumTile];
  float factor[kMaxHeads];
  for (int h = 0; h < heads; ++h)
    if (!quantize_weights(p + h * kInt8SumTile, s, n, levels.scale, w8[h], factor + h)) return false;
  int8_t level[kInt8SumTile][512];  // the rows' int8 levels, one per coordinate
  for (int i = 0; i < n; ++i) {
    if (f.codec == RowCodec::TQ_PAIRS) {
      for (int c = 0; c < d / 2; ++c) level[i][c] = levels.px[rows[i][c]], level[i][c + d / 2] = levels.py[rows[i][c]];
    } else {
      uint8_t idx[512];
      unpack_indices(rows[i], d, f.bits, idx);
      for (int c = 0; c < d; ++c) level[i][c] = levels.c8[idx[c]];
    }
  }
  for (int h = 0; h < heads; ++h)
    for (int c = 0; c < d; ++c) {
      int32_t dot = 0;
      for (int i = 0; i < n; ++i) dot += int32_t{w8[h][i]} * level[i][c];
      float& a = acc[size_t(h) * d + c];
      a = std::fma(static_cast<float>(dot), factor[h], a * correction[h]);
    }
  return true;
}

#if defined(__x86_64__) || defined(__i386__)

namespace {

#define TQ_VBMI __attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi,fma,f16c")))

// quantize_weights for 16 lanes (lanes past n masked to 0): the same products, checks, maximum
// and rounding (cvtps2dq rounds to nearest even, as nearbyint does).
TQ_VBMI inline bool quantize_weights_avx512(const float* p, __m512 s, __mmask16 live, float level_scale, uint8_t* w8,
                                     float* factor) {
  const __m512 w = _mm512_maskz_mul_ps(live, _mm512_loadu_ps(p), s);
  const __mmask16 ok = _mm512_cmp_ps_mask(w, _mm512_setzero_ps(), _CMP_GE_OQ) &
                       _mm512_cmp_ps_mask(w, _mm512_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ);
  if ((ok & live) != live) return false;
  const float top = _mm512_reduce_max_ps(w);
  const float inverse = top > 0 ? 255.0f / top : 0.0f;
  if (!std::isfinite(inverse)) return false;
  const __m512 x = _mm512_min_ps(_mm512_mul_ps(w, _mm512_set1_ps(inverse)), _mm512_set1_ps(255.0f));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(w8), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(x)));
  *factor = top > 0 ? top / 255.0f * level_scale : 0.0f;
  return true;
}

// bytes[m]: the byte permutation whose result's byte 4j + q is byte j + 16m of row q of a group
// of 4 rows (rows 0, 1 in the first register's halves, 2, 3 in the second's).
struct InterleaveTable {
  alignas(64) uint8_t bytes[2][64];
  constexpr InterleaveTable() : bytes{} {
    for (int m = 0; m < 2; ++m)
      for (int j = 0; j < 16; ++j)
        for (int q = 0; q < 4; ++q) bytes[m][4 * j + q] = static_cast<uint8_t>(32 * q + 16 * m + j);
  }
};
constexpr InterleaveTable kInterleave;

// Bytes [at, at + 32) of rows a (low 256 bits) and b.
TQ_VBMI inline __m512i row_pair(const uint8_t* a, const uint8_t* b, int at) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + at))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + at)), 1);
}

// CHUNKS = d / 64: chunk c is code bytes [32c, 32c + 32) of a row, whose low nibbles are
// coordinates 32c .. 32c + 31 and high nibbles d/2 + 32c .. . Rows go in groups of 4: a byte
// permutation of two registers (rows 4k, 4k+1 and 4k+2, 4k+3) puts the 4 rows' code bytes of 16
// byte positions in 32-bit lanes, and a mask (low nibbles) or shift and mask (high) and a table
// lookup make level bytes of them: the tile's registers for two blocks of 16 coordinates, group k.
// PAIRS (tq4p rows): each permuted code byte is a point (kernels/tq_pair_codes.h), its x for
// coordinate 32c + 16m + j and its y for d/2 + 32c + 16m + j, in the places of the nibbles.
template <int CHUNKS, bool PAIRS = false>
TQ_VBMI void tile_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8SumTile], int n,
                         const Int8Levels& levels, TqValueTile* tile) {
  constexpr int half = 32 * CHUNKS;
  const tq_rows::TileRows tile_rows = tq_rows::rows_or_zero(rows, n);
  const uint8_t* const* r = tile_rows.r;
  _mm512_store_ps(tile->scale, tq_rows::row_scales_avx512(f, rows, n));
  tile->n = n;
  tile->dim = f.dim;
  alignas(16) int8_t table[16];
  for (int k = 0; k < 16; ++k) table[k] = levels.c8[k];
  const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const tq_pair_codes::Table x_table = tq_pair_codes::load_table(levels.px, 7);
  const tq_pair_codes::Table y_table = tq_pair_codes::load_table(levels.py, 6);
  const __m512i interleave[2] = {_mm512_load_si512(kInterleave.bytes[0]), _mm512_load_si512(kInterleave.bytes[1])};
#pragma GCC unroll 8
  for (int c = 0; c < CHUNKS; ++c)
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i x0 = row_pair(r[4 * k], r[4 * k + 1], 32 * c), x1 = row_pair(r[4 * k + 2], r[4 * k + 3], 32 * c);
#pragma GCC unroll 2
      for (int m = 0; m < 2; ++m) {
        // The code bytes permuted whole: each byte's low nibble is coordinate 32c + 16m + j, its
        // high nibble d/2 + 32c + 16m + j, both already in their rows' places.
        const __m512i y = _mm512_permutex2var_epi8(x0, interleave[m], x1);
        const __m512i low = PAIRS ? tq_pair_codes::lookup<0>(x_table, y) : _mm512_shuffle_epi8(lut, _mm512_and_si512(y, nibble));
        const __m512i high = PAIRS ? tq_pair_codes::lookup<0>(y_table, y)
                                   : _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(y, 4), nibble));
        _mm512_store_si512(tile->levels[(32 * c + 16 * m) / 16][k], low);
        _mm512_store_si512(tile->levels[(half + 32 * c + 16 * m) / 16][k], high);
      }
    }
}

// bytes: the byte permutation whose result's byte 4j + q is byte 16q + j (row q's byte j, the 4
// rows in the 128-bit lanes).
struct LanesInterleaveTable {
  alignas(64) uint8_t bytes[64];
  constexpr LanesInterleaveTable() : bytes{} {
    for (int j = 0; j < 16; ++j)
      for (int q = 0; q < 4; ++q) bytes[4 * j + q] = static_cast<uint8_t>(16 * q + j);
  }
};
constexpr LanesInterleaveTable kLanesInterleave;

// 2 and 3 bits (kernels/tq_low_bit_codes.h): for each group of 4 rows and run of 16 bytes, one
// byte permutation of the packed bytes (two at 3 bits) puts each byte position's 4 rows in one
// 32-bit lane; then the four k's index bytes and a table lookup make level bytes.
template <int BITS, int RUNS>
TQ_VBMI void tile_low_bits_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8SumTile], int n,
                                  const Int8Levels& levels, TqValueTile* tile) {
  constexpr int d = 64 * RUNS, quarter = d / 4;
  const tq_rows::TileRows tile_rows = tq_rows::rows_or_zero(rows, n);
  const uint8_t* const* r = tile_rows.r;
  _mm512_store_ps(tile->scale, tq_rows::row_scales_avx512(f, rows, n));
  tile->n = n;
  tile->dim = d;
  alignas(16) int8_t table[16];
  for (int k = 0; k < 16; ++k) table[k] = levels.c8[k];
  const __m512i lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
  const __m512i interleave = _mm512_load_si512(kLanesInterleave.bytes);
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const uint8_t* const* rg = r + 4 * g;
#pragma GCC unroll 8
    for (int c0 = 0; c0 < quarter; c0 += 16) {
      tq_low_bits::Run run = tq_low_bits::load_run<BITS>(rg, c0, d);
      // The packed bytes permuted once (not each k's indices): byte 4j + q is row q's byte j.
      run.low = _mm512_permutexvar_epi8(interleave, run.low);
      if (BITS == 3) run.high = _mm512_permutexvar_epi8(interleave, run.high);  // aligned bytes: each stands alone
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const int block = (c0 + k * quarter) / 16;
        _mm512_store_si512(tile->levels[block][g], _mm512_shuffle_epi8(lut, tq_low_bits::indices<BITS>(run, k)));
      }
    }
  }
}


template <int BITS>
TQ_VBMI void tile_low_bits_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8SumTile], int n,
                                  const Int8Levels& levels, TqValueTile* tile) {
  switch (f.dim) {
    case 64: return tile_low_bits_avx512<BITS, 1>(f, rows, n, levels, tile);
    case 128: return tile_low_bits_avx512<BITS, 2>(f, rows, n, levels, tile);
    case 256: return tile_low_bits_avx512<BITS, 4>(f, rows, n, levels, tile);
    default: return tile_low_bits_avx512<BITS, 8>(f, rows, n, levels, tile);
  }
}
// Each head's byte weights, then per block of 16 coordinates one vpdpbusd per group of 4 rows
// adds the rows' products with the head's 4 weight bytes to each coordinate's sum.
TQ_VBMI bool sums_avx512(const TqValueTile& tile, int n, const float* p, const float* correction, int heads,
                         float level_scale, float* acc) {
  const int d = tile.dim;
  const __mmask16 live = n >= kInt8SumTile ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
  const __m512 s = _mm512_load_ps(tile.scale);
  alignas(16) uint8_t w8[kMaxHeads][kInt8SumTile];
  float factor[kMaxHeads];
  for (int h = 0; h < heads; ++h)
    if (!quantize_weights_avx512(p + h * kInt8SumTile, s, live, level_scale, w8[h], factor + h)) return false;
  for (int h = 0; h < heads; ++h) {
    int32_t words[4];
    std::memcpy(words, w8[h], sizeof words);
    const __m512i w[4] = {_mm512_set1_epi32(words[0]), _mm512_set1_epi32(words[1]), _mm512_set1_epi32(words[2]),
                          _mm512_set1_epi32(words[3])};
    const __m512 kept_by = _mm512_set1_ps(correction[h]), factor_h = _mm512_set1_ps(factor[h]);
    float* acc_h = acc + size_t(h) * d;
#pragma GCC unroll 4
    for (int b = 0; b < d / 16; ++b) {
      __m512i dot = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) dot = _mm512_dpbusd_epi32(dot, w[k], _mm512_load_si512(tile.levels[b][k]));
      const __m512 kept = _mm512_mul_ps(_mm512_loadu_ps(acc_h + 16 * b), kept_by);
      _mm512_storeu_ps(acc_h + 16 * b, _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), factor_h, kept));
    }
  }
  return true;
}

}  // namespace

bool tq_value_sums_avx512_available() {
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi") &&
                          __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return cpu;
}

void tq_value_tile_avx512(const CodedRowFormat& f, const uint8_t* const rows[kInt8SumTile], int n,
                           const Int8Levels& levels, TqValueTile* tile) {
  check_tile(f, n);
  if (f.codec == RowCodec::TQ_PAIRS) {
    if (!levels.pairs_mirrored) fail("tq value sums: the tq4p points are not in the mirror-symmetric layout the AVX-512 summer reads");
    switch (f.dim) {
      case 64: return tile_avx512<1, true>(f, rows, n, levels, tile);
      case 128: return tile_avx512<2, true>(f, rows, n, levels, tile);
      case 256: return tile_avx512<4, true>(f, rows, n, levels, tile);
      default: return tile_avx512<8, true>(f, rows, n, levels, tile);
    }
  }
  if (f.bits == 2) return tile_low_bits_avx512<2>(f, rows, n, levels, tile);
  if (f.bits == 3) return tile_low_bits_avx512<3>(f, rows, n, levels, tile);
  switch (f.dim) {
    case 64: return tile_avx512<1>(f, rows, n, levels, tile);
    case 128: return tile_avx512<2>(f, rows, n, levels, tile);
    case 256: return tile_avx512<4>(f, rows, n, levels, tile);
    default: return tile_avx512<8>(f, rows, n, levels, tile);
  }
}

bool tq_value_sums_avx512(const TqValueTile& tile, int n, const float* p, const float* correction, int heads,
                           const Int8Levels& levels, float* acc) {
  check_heads(heads);
  if (n < 0 || n > tile.n) fail("tq value sums: {} rows asked of a tile of {}", n, tile.n);
  return sums_avx512(tile, n, p, correction, heads, levels.scale, acc);
}

#else

bool tq_value_sums_avx512_available() { return false; }

void tq_value_tile_avx512(const CodedRowFormat&, const uint8_t* const*, int, const Int8Levels&, TqValueTile*) {
  fail("tq value sums: the AVX-512 summer is not built for this architecture");
}

bool tq_value_sums_avx512(const TqValueTile&, int, const float*, const float*, int, const Int8Levels&, float*) {
  fail("tq value sums: the AVX-512 summer is not built for this architecture");
}

#endif

}  // namespace tq
