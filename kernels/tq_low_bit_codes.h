// The indices of 2- and 3-bit TurboQuant rows for the AVX-512 integer kernels (the key scores of
// kernels/tq_key_scores.h and the value sums of kernels/tq_value_sums.h), 16 coordinates of 4 rows
// per register. Internal to kernels/.
//
// Layout (kernels/tq_packing.h): byte c (c < d/4) holds the low two bits of the indices of
// coordinates c + k*d/4 at bits 2k; at 3 bits the high bit of coordinate c + k*d/4 is in byte
// c mod d/8 of the d/8 bytes after those, at bit 2k + c div d/8. For a group of 4 rows and a run
// of 16 bytes at c0 (c0 % 16 == 0, c0 < d/4) the rows go in the four 128-bit lanes (row q in lane
// q); a shift and mask per k, and for the high bits a per-word shift (the run's two 8-byte halves
// may sit at different bits), give each row's indices of coordinates c0 + k*d/4 + [0, 16).
#pragma once
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace tq::tq_low_bits {

#define TQ_LOW_BITS_TARGET __attribute__((target("avx512f,avx512bw"), always_inline)) inline

// 16 bytes of each of 4 rows at `at`.
TQ_LOW_BITS_TARGET __m512i lanes16(const uint8_t* const r[4], int at) {
  __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r[0] + at)));
  x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[1] + at)), 1);
  x = _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[2] + at)), 2);
  return _mm512_inserti32x4(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[3] + at)), 3);
}
// Two 8-byte runs of each of 4 rows, at at0 and at1.
TQ_LOW_BITS_TARGET __m128i two_runs8(const uint8_t* row, int at0, int at1) {
  return _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + at0)),
                            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + at1)));
}
TQ_LOW_BITS_TARGET __m512i lanes8x2(const uint8_t* const r[4], int at0, int at1) {
  __m512i x = _mm512_castsi128_si512(two_runs8(r[0], at0, at1));
  x = _mm512_inserti32x4(x, two_runs8(r[1], at0, at1), 1);
  x = _mm512_inserti32x4(x, two_runs8(r[2], at0, at1), 2);
  return _mm512_inserti32x4(x, two_runs8(r[3], at0, at1), 3);
}

// A run's packed bytes, loaded once for its four k.
struct Run {
  __m512i low;         // the 2-bit bytes
  __m512i high;        // 3 bits: the high-bit bytes of the run's two halves
  __m512i shift_base;  // 3 bits: each half's bit offset (c div d/8), per 16-bit word
};

template <int BITS>
TQ_LOW_BITS_TARGET Run load_run(const uint8_t* const r[4], int c0, int d) {
  static_assert(BITS == 2 || BITS == 3);
  const int quarter = d / 4, eighth = d / 8;
  Run run{lanes16(r, c0), _mm512_setzero_si512(), _mm512_setzero_si512()};
  if (BITS == 3) {
    run.high = lanes8x2(r, quarter + c0 % eighth, quarter + (c0 + 8) % eighth);
    const short b0 = static_cast<short>(c0 / eighth), b1 = static_cast<short>((c0 + 8) / eighth);
    run.shift_base = _mm512_broadcast_i32x4(_mm_setr_epi16(b0, b0, b0, b0, b1, b1, b1, b1));
  }
  return run;
}

// shift_base for a run whose bytes were permuted so that byte 4j + q is row q's byte j: byte
// positions j < 8 (coordinates c0 + [0, 8)) are the low 256 bits, j >= 8 the high.
TQ_LOW_BITS_TARGET __m512i interleaved_shift_base(int c0, int d) {
  const int eighth = d / 8;
  const short b0 = static_cast<short>(c0 / eighth), b1 = static_cast<short>((c0 + 8) / eighth);
  return _mm512_inserti64x4(_mm512_set1_epi16(b0), _mm256_set1_epi16(b1), 1);
}

// The index bytes (0 .. 2^BITS - 1) of coordinates c0 + k*d/4 + [0, 16) of the run's 4 rows, in
// the places of their packed bytes (per-byte arithmetic, so a run permuted first gives them
// permuted alike).
template <int BITS>
TQ_LOW_BITS_TARGET __m512i indices(const Run& run, int k) {
  __m512i idx = _mm512_and_si512(_mm512_srli_epi16(run.low, 2 * k), _mm512_set1_epi8(3));
  if (BITS == 3) {
    const __m512i shift = _mm512_add_epi16(run.shift_base, _mm512_set1_epi16(static_cast<short>(2 * k)));
    const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(run.high, shift), _mm512_set1_epi8(1));
    idx = _mm512_or_si512(idx, _mm512_slli_epi16(bit, 2));  // bit < 2: no carry into the next byte
  }
  return idx;
}

#undef TQ_LOW_BITS_TARGET

}  // namespace tq::tq_low_bits

#endif
