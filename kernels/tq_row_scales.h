// The scale stored after a TurboQuant row's d*b/8 code bytes (fp16 or fp32, kernels/tq_packing.h),
// read one row at a time or for a tile of 16 rows in AVX-512 lanes: what the integer key scores and
// value sums (kernels/tq_key_scores.h, kernels/tq_value_sums.h) multiply in. Internal to kernels/.
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/coded_row.h"
#include "kernels/dequantize.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tq::tq_rows {

constexpr int kTileRows = 16;

inline int scale_offset(const CodedRowFormat& f) { return f.dim * f.bits / 8; }

// A tile's rows with those past n pointed at zero code bytes (as many as the widest row's: d 512 at
// 4 bits), so that the kernels read all 16 rows' codes without a branch; their lanes are masked
// or weighted 0 afterwards, and their scales are never read.
struct TileRows {
  const uint8_t* r[kTileRows];
};
inline TileRows rows_or_zero(const uint8_t* const rows[kTileRows], int n) {
  static const uint8_t kZeroCodes[256] = {};
  TileRows t;
  for (int i = 0; i < kTileRows; ++i) t.r[i] = i < n ? rows[i] : kZeroCodes;
  return t;
}

inline float row_scale(const CodedRowFormat& f, const uint8_t* row) {
  const uint8_t* p = row + scale_offset(f);
  if (f.f16_scale) {
    uint16_t h;
    std::memcpy(&h, p, sizeof h);
    return fp16_to_fp32(h);
  }
  float s;
  std::memcpy(&s, p, sizeof s);
  return s;
}

#if defined(__x86_64__) || defined(__i386__)
// Rows 0 .. n-1's scales in 16 lanes (0 past n): fp16 ones converted by F16C, exactly as fp16_to_fp32.
// The lanes are put together in registers: 16 narrow stores read back as one vector would miss
// store-to-load forwarding, a stall per tile that showed in profiles.
__attribute__((target("avx512f,f16c"), always_inline)) inline __m512 row_scales_avx512(
    const CodedRowFormat& f, const uint8_t* const rows[kTileRows], int n) {
  const int at = scale_offset(f);
  if (f.f16_scale) {
    const auto scale_bits = [&](int i) -> uint64_t {
      if (i >= n) return 0;
      uint16_t h;
      std::memcpy(&h, rows[i] + at, sizeof h);
      return h;
    };
    const auto four = [&](int i) {
      return static_cast<long long>(scale_bits(i) | scale_bits(i + 1) << 16 | scale_bits(i + 2) << 32 |
                                    scale_bits(i + 3) << 48);
    };
    const __m256i h = _mm256_setr_epi64x(four(0), four(4), four(8), four(12));
    return _mm512_cvtph_ps(h);
  }
  const auto scale = [&](int i) {
    float s = 0;
    if (i < n) std::memcpy(&s, rows[i] + at, sizeof s);
    return s;
  };
  const auto four = [&](int i) { return _mm_setr_ps(scale(i), scale(i + 1), scale(i + 2), scale(i + 3)); };
  const __m512 s = _mm512_castps128_ps512(four(0));
  return _mm512_insertf32x4(_mm512_insertf32x4(_mm512_insertf32x4(s, four(4), 1), four(8), 2), four(12), 3);
}
#endif

}  // namespace tq::tq_rows
