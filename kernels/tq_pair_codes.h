// The codes of tq4p rows (RowCodec::TQ_PAIRS, kernels/coded_row.h) for the AVX-512 integer kernels:
// a byte per pair of coordinates turned into the int8 x or y of its point, 64 bytes at a time.
// Internal to kernels/.
//
// The points are mirror-symmetric in a fixed layout (tools/gen_pair_codebook.py; checked by
// int8_pair_levels, which sets Int8Levels::pairs_mirrored): point 64s + k is (+-|x_k|, +-|y_k|),
// x positive where bit 7 of the code is set and y where bit 6 is, and points 192..255 hold the
// magnitudes. So a lookup is one 64-entry byte permute of the magnitudes (on the code's low 6
// bits) and a sign from one bit of the code.
#pragma once
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace tq::tq_pair_codes {

#define TQ_PAIR_CODES_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi"), always_inline)) inline

// One coordinate's magnitudes: `levels` is px or py of Int8Levels (256 entries), sign_bit 7 for
// x, 6 for y.
struct Table {
  __m512i magnitude;
  __m512i sign_bit;
};
TQ_PAIR_CODES_TARGET Table load_table(const int8_t* levels, int sign_bit) {
  return {_mm512_loadu_si512(levels + 192), _mm512_set1_epi8(static_cast<char>(1 << sign_bit))};
}

// Byte i of the result = levels[codes byte i] + bias (bias 0, or 128 for the unsigned bytes vpdpbusd
// takes): the magnitude, then bias + m where the sign bit is set and bias - m where it is not.
template <int BIAS>
TQ_PAIR_CODES_TARGET __m512i lookup(const Table& t, __m512i codes) {
  const __m512i m = _mm512_permutexvar_epi8(codes, t.magnitude);
  const __mmask64 positive = _mm512_test_epi8_mask(codes, t.sign_bit);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(BIAS));
  return _mm512_mask_add_epi8(_mm512_sub_epi8(bias, m), positive, bias, m);
}

}  // namespace tq::tq_pair_codes

#endif
