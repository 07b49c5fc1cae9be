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
__attribute__((target("avx512f,f16c"), always_inline)) inline __m512 row_scales_avx512(
    const CodedRowFormat& f, const uint8_t* const rows[kTileRows], int n) {
  const int at = scale_offset(f);
  if (f.f16_scale) {
    alignas(32) uint16_t h[kTileRows] = {};
    for (int i = 0; i < n; ++i) std::memcpy(h + i, rows[i] + at, sizeof(uint16_t));
    return _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(h)));
  }
  alignas(64) float s[kTileRows] = {};
  for (int i = 0; i < n; ++i) std::memcpy(s + i, rows[i] + at, sizeof(float));
  return _mm512_load_ps(s);
}
#endif

}  // namespace tq::tq_rows
