// The indices of 2- and 3-bit TurboQuant rows for the AVX-512 integer kernels (the key scores of
// kernels/tq_key_scores.h and the value sums of kernels/tq_value_sums.h), 16 coordinates of 4 rows
// per register. Internal to kernels/.
//
// Layout (kernels/tq_packing.h): byte c (c < d/4) holds the low two bits of the indices of
// coordinates c + k*d/4 at bits 2k; at 3 bits the high bit of coordinate c + k*d/4 is in byte
// c mod d/8 of the d/8 bytes after those, at bit 2k + c div d/8. For a group of 4 rows and a run
// of 16 bytes at c0 (c0 % 16 == 0, c0 < d/4) the rows go in the four 128-bit lanes (row q in lane
// q); a shift and mask per k give each row's low bits of coordinates c0 + k*d/4 + [0, 16). The
// high bits are aligned once per run: each byte shifted by its half's offset (c div d/8, 0 or 1)
// and masked to its even bits, so bit 2k of every byte is the high bit for k and every byte
// depends on itself alone (a run may be permuted by bytes afterwards).
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
// The 8 bytes at `at` of each of 4 rows, in both halves of its lane.
TQ_LOW_BITS_TARGET __m512i lanes8_twice(const uint8_t* const r[4], int at) {
  const auto run8 = [at](const uint8_t* row) {
    long long v;
    __builtin_memcpy(&v, row + at, sizeof v);
    return _mm_set1_epi64x(v);
  };
  __m512i x = _mm512_castsi128_si512(run8(r[0]));
  x = _mm512_inserti32x4(x, run8(r[1]), 1);
  x = _mm512_inserti32x4(x, run8(r[2]), 2);
  return _mm512_inserti32x4(x, run8(r[3]), 3);
}

// A run's packed bytes, loaded once for its four k.
struct Run {
  __m512i low;   // the 2-bit bytes
  __m512i high;  // 3 bits: the high-bit bytes, aligned (bit 2k of each byte is the high bit for k, odd bits 0)
};

template <int BITS>
TQ_LOW_BITS_TARGET Run load_run(const uint8_t* const r[4], int c0, int d) {
  static_assert(BITS == 2 || BITS == 3);
  const int quarter = d / 4, eighth = d / 8;
  Run run{lanes16(r, c0), _mm512_setzero_si512()};
  if (BITS == 3) {
    // The run's two 8-byte halves read high-bit bytes c0 mod d/8 and (c0 + 8) mod d/8: at d = 64
    // the same 8 bytes (offsets 0 and 1), from d = 128 on 16 consecutive bytes at one offset.
    const __m512i raw = eighth == 8 ? lanes8_twice(r, quarter) : lanes16(r, quarter + c0 % eighth);
    const short b0 = static_cast<short>(c0 / eighth), b1 = static_cast<short>((c0 + 8) / eighth);
    const __m512i offset = _mm512_broadcast_i32x4(_mm_setr_epi16(b0, b0, b0, b0, b1, b1, b1, b1));
    // A word shifted by 1 brings its high byte's bit 0 into the low byte's bit 7, which the mask clears.
    run.high = _mm512_and_si512(_mm512_srlv_epi16(raw, offset), _mm512_set1_epi8(0x55));
  }
  return run;
}

// The index bytes of coordinates c0 + k*d/4 + [0, 16) of the run's 4 rows, in the places of their
// packed bytes, for a 16-entry byte table lookup (vpshufb): bits 0-2 the index, bit 3 and bit 7
// zero, bits 4-6 unspecified at 3 bits (the 16-bit shifts may bring a neighbour byte's bits
// there). Bits 0-3 and 7 depend on their own byte alone, so a run permuted by bytes first gives
// them permuted alike.
template <int BITS>
TQ_LOW_BITS_TARGET __m512i indices(const Run& run, int k) {
  const __m512i low = _mm512_srli_epi16(run.low, 2 * k);
  if (BITS == 2) return _mm512_and_si512(low, _mm512_set1_epi8(3));
  // Bit 2k of the aligned high bytes to bit 2: even shifts keep every set bit even, so bits 3 and 7 stay 0.
  const __m512i high = k == 0   ? _mm512_slli_epi16(run.high, 2)
                       : k == 1 ? run.high
                                : _mm512_srli_epi16(run.high, 2 * k - 2);
  // Bits 0-1 from the low bytes, bits 2-7 from the high: (mask & low) | (~mask & high).
  return _mm512_ternarylogic_epi32(_mm512_set1_epi8(3), low, high, 0xCA);
}

#undef TQ_LOW_BITS_TARGET

}  // namespace tq::tq_low_bits

#endif
