// Pieces of a K-quant group slice (kernels/interleaved_rows.h) shared by the VNNI kernel
// (stored_matmul_avx512.cpp) and the AMX one (stored_matmul_amx.cpp), which must form the same
// values bit for bit. Include only from files compiled with AVX-512 (F, BW); everything
// here has internal linkage, so no copy compiled with other flags can be picked by the linker.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace tq {
namespace {

// A Q6_K slice's (its 26·16 bytes, scales first) values 4k..4k+3 (*low) and 16+4k..16+4k+3 (*high) of
// each of the 16 rows, stored q + 32 (0..63): four bits from nibble chunk k, two from a top-bits chunk.
inline void q6_k_chunk_values(const uint8_t* slice, int k, __m512i* low, __m512i* high) {
  constexpr int kRows = 16;
  const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(0x03);
  const __m512i nibbles = _mm512_loadu_si512(slice + 2 * kRows + 4 * kRows * k);
  __m512i tops = _mm512_loadu_si512(slice + 18 * kRows + 4 * kRows * (k / 2));
  if (k % 2) tops = _mm512_srli_epi16(tops, 4);
  *low = _mm512_or_si512(_mm512_and_si512(nibbles, low4), _mm512_slli_epi16(_mm512_and_si512(tops, low2), 4));
  *high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(nibbles, 4), low4),
                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(tops, 2), low2), 4));
}

}  // namespace
}  // namespace tq
