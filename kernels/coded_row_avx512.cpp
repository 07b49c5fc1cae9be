// AVX-512 row decoders (kernels/coded_row.h: decode_coded_rows_avx512): 16 values per
// instruction where the AVX2 decoders take 8, with the same arithmetic per value (one rounded
// product level * scale or q * d, or an exact conversion), so the results are the scalar
// decoder's bit for bit. TurboQuant codes index a 16-entry table held in one register
// (vpermps), which needs no blend for the fourth bit as the AVX2 lookup does.
#include <cstring>

#include "kernels/coded_row.h"
#include "kernels/ggml_blocks.h"

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's 512-bit intrinsics pass _mm512_undefined_*() as the unused merge source, which
// -Wmaybe-uninitialized reports once they are inlined under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace tq {
namespace {

#define TQ_AVX512 __attribute__((target("avx512f,fma,f16c")))
#define TQ_AVX512_INLINE __attribute__((target("avx512f,fma,f16c"), always_inline)) inline

// F16C's conversion (exact, as fp16_to_fp32's), inlined: it runs once per row.
TQ_AVX512_INLINE float load_f16_value(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(v)));
}

inline float load_f32_value(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// 16 consecutive bytes, zero-extended to 32-bit lanes.
TQ_AVX512_INLINE __m512i load16_u8(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// The bit widths with a decoder here, for d coordinates: the packing's runs must be whole
// 16-byte loads (kernels/tq_packing.h layouts; see the AVX2 decoders in coded_row.cpp).
bool tq_avx512_bits(int bits, int d) {
  return (bits == 4 && d % 32 == 0) || (bits == 2 && d % 64 == 0) || (bits == 3 && d % 64 == 0);
}

// tq3o / tq2o rows (kernels/coded_row.h TQ_ORTHANT; D = group = 4 or 8): 16 coordinates at a time,
// lane j gathering levels[code * D + k] for the chunk's pattern byte j / D and k = j % D, times the
// scale, negated (sign bit flipped, as the scalar -v) where the sign map's bit is set.
TQ_AVX512_INLINE void decode_orthant(const uint8_t* row, int d, int group, const float* levels, float scale, float* out) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const bool four = group == 4;
  const __m128i spread = four ? _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
                              : _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i within = four ? _mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3)
                              : _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
  const int shift = four ? 2 : 3;
  const uint8_t* signs = row + d / group;
  for (int c = 0; c < d; c += 16) {
    uint32_t bytes;  // the chunk's 4 (or 2, and 2 bytes after them in the row) pattern bytes
    std::memcpy(&bytes, row + c / group, sizeof bytes);
    const __m128i lanes = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(bytes)), spread);
    const __m512i idx = _mm512_add_epi32(_mm512_slli_epi32(_mm512_cvtepu8_epi32(lanes), shift), within);
    const __m512i v = _mm512_castps_si512(_mm512_mul_ps(_mm512_i32gather_ps(idx, levels, 4), s));
    uint16_t negative;
    std::memcpy(&negative, signs + c / 8, sizeof negative);
    _mm512_storeu_ps(out + c, _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, negative, v, sign)));
  }
}

// b = 4: byte c (c < d/2) = idx[c] | idx[c + d/2] << 4; vpermps reads the low 4 bits only.
TQ_AVX512_INLINE void decode4(const uint8_t* codes, int d, __m512 table, float* out) {
  const int half = d / 2;
  for (int c = 0; c < half; c += 16) {
    const __m512i bytes = load16_u8(codes + c);
    _mm512_storeu_ps(out + c, _mm512_permutexvar_ps(bytes, table));
    _mm512_storeu_ps(out + c + half, _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table));
  }
}

// b = 2: byte c (c < d/4) holds idx[c + k*d/4] at bits 2k.
TQ_AVX512_INLINE void decode2(const uint8_t* codes, int d, __m512 table, float* out) {
  const __m512i m2 = _mm512_set1_epi32(3);
  const int s = d / 4;
  for (int c = 0; c < s; c += 16) {
    const __m512i bytes = load16_u8(codes + c);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k)
      _mm512_storeu_ps(out + c + k * s,
                       _mm512_permutexvar_ps(_mm512_and_si512(_mm512_srli_epi32(bytes, 2 * k), m2), table));
  }
}

// b = 3: the low two bits in the 2-bit layout (bytes [0, d/4)), the high bit in the 1-bit layout
// (bytes [d/4, d/4 + d/8)): coordinate j = c + k*d/4 (c < d/4) has it in byte c mod d/8 at bit
// 2k + c div d/8. A run of 16 may straddle d/8 (d = 64), a run of 8 never does (d % 64 == 0), so
// each half of the run gets its own load and shift. `table` holds the 8 levels twice (entries
// 8..15 = 0..7), so bit 3 of an index is free: one ternary-logic op takes bits 0-1 from the low
// codes and bit 2 up from the high bit moved there.
TQ_AVX512_INLINE void decode3(const uint8_t* codes, int d, __m512 table, float* out) {
  const int s2 = d / 4, s1 = d / 8;
  const uint8_t* high = codes + s2;
  for (int c = 0; c < s2; c += 16) {
    const __m512i lo = load16_u8(codes + c);
    const int second0 = c >= s1 ? 1 : 0, second1 = c + 8 >= s1 ? 1 : 0;
    const __m128i hb8 = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(high + c - second0 * s1)),
                                           _mm_loadl_epi64(reinterpret_cast<const __m128i*>(high + c + 8 - second1 * s1)));
    const __m512i hb4 = _mm512_slli_epi32(_mm512_cvtepu8_epi32(hb8), 2);  // the high bit of k = 0 at bit 2
    const __m512i base = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(second0)),
                                            _mm256_set1_epi32(second1), 1);
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512i low = _mm512_srli_epi32(lo, 2 * k);
      const __m512i top = _mm512_srlv_epi32(hb4, _mm512_add_epi32(base, _mm512_set1_epi32(2 * k)));
      // (low & 3) | (top & ~3): imm8 0xE4 selects A where C is set, B elsewhere.
      const __m512i idx = _mm512_ternarylogic_epi32(low, top, _mm512_set1_epi32(3), 0xE4);
      _mm512_storeu_ps(out + c + k * s2, _mm512_permutexvar_ps(idx, table));
    }
  }
}

// levels * scale in 16 entries: unused ones 0, except at 3 bits, where entries 8..15 repeat 0..7
// (decode3).
TQ_AVX512_INLINE __m512 scaled_table(const float* levels, int bits, float scale) {
  const __mmask16 used = __mmask16((1u << (1 << bits)) - 1);
  __m512 t = _mm512_maskz_loadu_ps(used, levels);
  if (bits == 3) t = _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(1, 0, 1, 0));
  return _mm512_mul_ps(t, _mm512_set1_ps(scale));
}

TQ_AVX512_INLINE void decode_tq_part(const uint8_t* codes, int d, int bits, const float* levels, float scale,
                                     float* out) {
  const __m512 table = scaled_table(levels, bits, scale);
  switch (bits) {
    case 4: decode4(codes, d, table, out); return;
    case 3: decode3(codes, d, table, out); return;
    default: decode2(codes, d, table, out); return;
  }
}

TQ_AVX512_INLINE void decode_f16(const uint8_t* row, int d, float* out) {
  for (int j = 0; j < d; j += 16)
    _mm512_storeu_ps(out + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j))));
}

TQ_AVX512_INLINE void decode_bf16(const uint8_t* row, int d, float* out) {
  for (int j = 0; j < d; j += 16) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j)));
    _mm512_storeu_ps(out + j, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
  }
}

TQ_AVX512_INLINE void decode_q8_0(const uint8_t* row, int d, float* out) {
  for (int b = 0; b < d / BlockQ8_0::kValues; ++b, row += sizeof(BlockQ8_0), out += BlockQ8_0::kValues) {
    const __m512 s = _mm512_set1_ps(load_f16_value(row + offsetof(BlockQ8_0, d)));
    const uint8_t* qs = row + offsetof(BlockQ8_0, qs);
#pragma GCC unroll 2
    for (int j = 0; j < BlockQ8_0::kValues; j += 16) {
      const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + j)));
      _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_cvtepi32_ps(q), s));
    }
  }
}

TQ_AVX512_INLINE void decode_q4_0(const uint8_t* row, int d, float* out) {
  const __m512i m4 = _mm512_set1_epi32(15), eight = _mm512_set1_epi32(8);
  for (int b = 0; b < d / BlockQ4_0::kValues; ++b, row += sizeof(BlockQ4_0), out += BlockQ4_0::kValues) {
    const __m512 s = _mm512_set1_ps(load_f16_value(row + offsetof(BlockQ4_0, d)));
    const __m512i bytes = load16_u8(row + offsetof(BlockQ4_0, qs));
    const __m512i lo = _mm512_sub_epi32(_mm512_and_si512(bytes, m4), eight);
    const __m512i hi = _mm512_sub_epi32(_mm512_srli_epi32(bytes, 4), eight);
    _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), s));
    _mm512_storeu_ps(out + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), s));
  }
}

bool cpu_has_avx512() {
  static const bool ok =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

}  // namespace

bool coded_row_avx512_available(const CodedRowFormat& f) {
  if (!cpu_has_avx512() || f.dim <= 0 || f.dim % 16 != 0) return false;
  switch (f.codec) {
    case RowCodec::F32:
    case RowCodec::BF16:
    case RowCodec::F16:
    case RowCodec::Q8_0:
    case RowCodec::Q4_0:
      return true;
    case RowCodec::TQ:
      return tq_avx512_bits(f.bits, f.dim);
    case RowCodec::TQ_SPLIT:
      return tq_avx512_bits(f.bits, f.dim / 2) && tq_avx512_bits(f.bits_lo, f.dim / 2);
    case RowCodec::TQ_ORTHANT:
      return f.bits == 2 || f.bits == 3;
    case RowCodec::TQ_CHANNELS:
    case RowCodec::TQ_PAIRS:
      return false;
  }
  return false;
}

TQ_AVX512 void decode_coded_rows_avx512(const CodedRowFormat& f, const uint8_t* first, size_t row_stride, int n,
                                        float* out, size_t out_stride) {
  const int d = f.dim;
  switch (f.codec) {
    case RowCodec::F32:
      for (int i = 0; i < n; ++i) std::memcpy(out + i * out_stride, first + i * row_stride, sizeof(float) * d);
      return;
    case RowCodec::BF16:
      for (int i = 0; i < n; ++i) decode_bf16(first + i * row_stride, d, out + i * out_stride);
      return;
    case RowCodec::F16:
      for (int i = 0; i < n; ++i) decode_f16(first + i * row_stride, d, out + i * out_stride);
      return;
    case RowCodec::Q8_0:
      for (int i = 0; i < n; ++i) decode_q8_0(first + i * row_stride, d, out + i * out_stride);
      return;
    case RowCodec::Q4_0:
      for (int i = 0; i < n; ++i) decode_q4_0(first + i * row_stride, d, out + i * out_stride);
      return;
    case RowCodec::TQ: {
      const size_t codes = size_t(d) * f.bits / 8;
      for (int i = 0; i < n; ++i) {
        const uint8_t* row = first + i * row_stride;
        const float scale = f.f16_scale ? load_f16_value(row + codes) : load_f32_value(row + codes);
        decode_tq_part(row, d, f.bits, f.levels, scale, out + i * out_stride);
      }
      return;
    }
    case RowCodec::TQ_SPLIT: {
      const int h = d / 2;
      const size_t hi_bytes = size_t(h) * f.bits / 8, codes = hi_bytes + size_t(h) * f.bits_lo / 8;
      for (int i = 0; i < n; ++i) {
        const uint8_t* row = first + i * row_stride;
        decode_tq_part(row, h, f.bits, f.levels, load_f16_value(row + codes), out + i * out_stride);
        decode_tq_part(row + hi_bytes, h, f.bits_lo, f.levels_lo, load_f16_value(row + codes + 2),
                       out + i * out_stride + h);
      }
      return;
    }
    case RowCodec::TQ_ORTHANT: {
      const int group = orthant_pattern_coordinates(f.bits);
      const size_t scale_at = orthant_scale_offset(d, f.bits);
      for (int i = 0; i < n; ++i) {
        const uint8_t* row = first + i * row_stride;
        decode_orthant(row, d, group, f.levels, load_f16_value(row + scale_at), out + i * out_stride);
      }
      return;
    }
    case RowCodec::TQ_CHANNELS:
    case RowCodec::TQ_PAIRS:
      break;
  }
  decode_coded_rows_avx2(f, first, row_stride, n, out, out_stride);  // not reached when available
}

}  // namespace tq

#else  // !x86

namespace tq {

bool coded_row_avx512_available(const CodedRowFormat&) { return false; }

void decode_coded_rows_avx512(const CodedRowFormat& f, const uint8_t* first, size_t row_stride, int n, float* out,
                              size_t out_stride) {
  for (int i = 0; i < n; ++i) decode_coded_row_scalar(f, first + i * row_stride, out + i * out_stride);
}

}  // namespace tq

#endif
