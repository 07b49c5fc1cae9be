#include "kernels/coded_row.h"

#include <algorithm>
#include <cstring>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/ggml_blocks.h"
#include "kernels/tq_packing.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_HAVE_X86 1
#else
#define TQ_HAVE_X86 0
#endif

namespace tq {
namespace {

constexpr int kMaxDim = 512;
constexpr int kBlock = BlockQ8_0::kValues;  // as BlockQ4_0's

float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Packed-code bytes of `dim` values at `bits`, without tq_codes_bytes' shape check: decoders run
// per row, and a format is checked once (check_coded_row_format) before rows are decoded.
inline size_t codes_bytes(int dim, int bits) { return size_t(dim) * bits / 8; }

// The scale of a whole TurboQuant row (TQ), stored after its codes.
inline float tq_scale(const CodedRowFormat& f, const uint8_t* row) {
  const uint8_t* at = row + codes_bytes(f.dim, f.bits);
  return f.f16_scale ? fp16_at(at) : load_f32(at);
}

// out[j] = levels[idx_j] * scale over one TurboQuant half or whole row of `dim` values.
void decode_tq_scalar(const uint8_t* codes, int dim, int bits, const float* levels, float scale, float* out) {
  uint8_t idx[kMaxDim];
  unpack_indices(codes, dim, bits, idx);
  for (int j = 0; j < dim; ++j) out[j] = levels[idx[j]] * scale;
}

// One channel-bit part: out[j] = levels[idx_j] * scale, or 0 for a 0-bit part.
void decode_channel_part_scalar(const uint8_t* codes, int dim, int bits, const float* levels, float scale, float* out) {
  if (bits == 0) {
    std::fill(out, out + dim, 0.0f);
    return;
  }
  uint8_t idx[kMaxDim];
  unpack_channel_part(codes, dim, bits, idx);
  for (int j = 0; j < dim; ++j) out[j] = levels[idx[j]] * scale;
}

// A tq4p row's pairs from pair `from` on: out[c] = scale * x of point code[c], out[c + d/2] = its y.
void decode_pairs_scalar(const uint8_t* codes, int dim, const float* points, float scale, float* out, int from) {
  const int h = dim / 2;
  for (int c = from; c < h; ++c) {
    out[c] = points[2 * codes[c]] * scale;
    out[c + h] = points[2 * codes[c] + 1] * scale;
  }
}

// A tq3o / tq2o row: out[g D + k] = +-scale * levels[code_g][k], negative where the sign map's bit is set.
void decode_orthant_scalar(const uint8_t* row, int dim, int bits, const float* levels, float scale, float* out) {
  const int group = orthant_pattern_coordinates(bits);
  const uint8_t* signs = row + dim / group;
  for (int c = 0; c < dim; ++c) {
    const float v = levels[row[c / group] * group + c % group] * scale;
    out[c] = (signs[c / 8] >> (c % 8)) & 1 ? -v : v;
  }
}

size_t channel_codes_bytes(const CodedRowFormat& f) {
  size_t bytes = 0;
  for (int p = 0; p < f.parts; ++p) bytes += size_t(f.part_dims[p]) * f.part_bits[p] / 8;
  return bytes;
}

}  // namespace

void check_coded_row_format(const CodedRowFormat& f) {
  if (f.dim <= 0 || f.dim > kMaxDim) fail("KV row head_dim {} must be in 1..{}", f.dim, kMaxDim);
  switch (f.codec) {
    case RowCodec::F32:
    case RowCodec::BF16:
    case RowCodec::F16:
      return;
    case RowCodec::Q8_0:
    case RowCodec::Q4_0:
      if (f.dim % kBlock != 0) fail("q8_0 / q4_0 KV rows need head_dim to be a multiple of 32, got {}", f.dim);
      return;
    case RowCodec::TQ:
      check_tq_row_shape(f.dim, f.bits);
      if (!f.levels) fail("TurboQuant KV rows need codebook levels");
      return;
    case RowCodec::TQ_SPLIT:
      check_tq_split_row_shape(f.dim, f.bits, f.bits_lo);
      if (!f.levels || !f.levels_lo) fail("TurboQuant split KV rows need both codebooks");
      return;
    case RowCodec::TQ_CHANNELS: {
      if (f.parts < 1 || f.parts > kMaxChannelParts) fail("channel-bit KV rows need 1..{} parts, got {}", kMaxChannelParts, f.parts);
      int total = 0;
      for (int p = 0; p < f.parts; ++p) {
        check_channel_part_shape(f.part_dims[p], f.part_bits[p]);
        if (f.part_bits[p] > 0 && !f.part_levels[p]) fail("channel-bit KV rows need levels for their {}-bit part", f.part_bits[p]);
        total += f.part_dims[p];
      }
      if (total != f.dim) fail("channel-bit KV row parts cover {} coordinates, head_dim is {}", total, f.dim);
      return;
    }
    case RowCodec::TQ_PAIRS:
      if (f.dim % 2 != 0) fail("tq4p KV rows need an even head_dim, got {}", f.dim);
      if (!f.levels) fail("tq4p KV rows need their codebook's points");
      return;
    case RowCodec::TQ_ORTHANT:
      if (f.bits != 2 && f.bits != 3) fail("orthant-coded KV rows have 2 or 3 bits per coordinate, not {}", f.bits);
      if (f.dim % 8 != 0) fail("tq{}o KV rows need head_dim to be a multiple of 8, got {}", f.bits, f.dim);
      if (!f.levels) fail("tq{}o KV rows need their codebook's patterns", f.bits);
      return;
  }
  fail("unknown KV row codec {}", int(f.codec));
}

size_t coded_row_bytes(const CodedRowFormat& f) {
  switch (f.codec) {
    case RowCodec::F32: return size_t(f.dim) * 4;
    case RowCodec::BF16:
    case RowCodec::F16: return size_t(f.dim) * 2;
    case RowCodec::Q8_0: return size_t(f.dim / kBlock) * sizeof(BlockQ8_0);
    case RowCodec::Q4_0: return size_t(f.dim / kBlock) * sizeof(BlockQ4_0);
    case RowCodec::TQ: return tq_row_bytes(f.dim, f.bits) - (f.f16_scale ? 2 : 0);
    case RowCodec::TQ_SPLIT: return tq_split_row_bytes(f.dim, f.bits, f.bits_lo);
    case RowCodec::TQ_CHANNELS: return channel_codes_bytes(f) + 2;
    case RowCodec::TQ_PAIRS: return size_t(f.dim) / 2 + 2;
    case RowCodec::TQ_ORTHANT:
      if (f.bits != 2 && f.bits != 3) fail("orthant-coded KV rows have 2 or 3 bits per coordinate, not {}", f.bits);
      return orthant_scale_offset(f.dim, f.bits) + 2;
  }
  return 0;
}

void decode_coded_row_scalar(const CodedRowFormat& f, const uint8_t* row, float* out) {
  const int d = f.dim;
  switch (f.codec) {
    case RowCodec::F32:
      std::memcpy(out, row, sizeof(float) * d);
      return;
    case RowCodec::BF16:
      for (int j = 0; j < d; ++j) {
        uint16_t h;
        std::memcpy(&h, row + 2 * j, 2);
        out[j] = bf16_to_fp32(h);
      }
      return;
    case RowCodec::F16:
      for (int j = 0; j < d; ++j) out[j] = fp16_at(row + 2 * j);
      return;
    case RowCodec::Q8_0:  // ggml's block layouts and arithmetic (kernels/dequantize.h)
      dequantize_row(DType::Q8_0, row, out, d);
      return;
    case RowCodec::Q4_0:
      dequantize_row(DType::Q4_0, row, out, d);
      return;
    case RowCodec::TQ:
      decode_tq_scalar(row, d, f.bits, f.levels, tq_scale(f, row), out);
      return;
    case RowCodec::TQ_SPLIT: {
      const int h = d / 2;
      const size_t hi_bytes = codes_bytes(h, f.bits), codes = hi_bytes + codes_bytes(h, f.bits_lo);
      decode_tq_scalar(row, h, f.bits, f.levels, fp16_at(row + codes), out);
      decode_tq_scalar(row + hi_bytes, h, f.bits_lo, f.levels_lo, fp16_at(row + codes + 2), out + h);
      return;
    }
    case RowCodec::TQ_CHANNELS: {
      const float scale = fp16_at(row + channel_codes_bytes(f));
      for (int p = 0, at = 0; p < f.parts; at += f.part_dims[p], ++p) {
        decode_channel_part_scalar(row, f.part_dims[p], f.part_bits[p], f.part_levels[p], scale, out + at);
        row += size_t(f.part_dims[p]) * f.part_bits[p] / 8;
      }
      return;
    }
    case RowCodec::TQ_PAIRS:
      decode_pairs_scalar(row, d, f.levels, fp16_at(row + d / 2), out, 0);
      return;
    case RowCodec::TQ_ORTHANT:
      decode_orthant_scalar(row, d, f.bits, f.levels, fp16_at(row + orthant_scale_offset(d, f.bits)), out);
      return;
  }
}

#if TQ_HAVE_X86

namespace {

#define TQ_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TQ_AVX2_INLINE __attribute__((target("avx2,fma,f16c"), always_inline)) inline

// 8 consecutive bytes, zero-extended to 32-bit lanes.
TQ_AVX2_INLINE __m256i load8_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// 16-level lookup: each half of the codebook is one register; permute on the low 3 bits of the
// index in both and pick by bit 3 (moved to the sign bit for blendv).
TQ_AVX2_INLINE __m256 lut16(__m256 lo, __m256 hi, __m256i idx) {
  const __m256 a = _mm256_permutevar8x32_ps(lo, idx);
  const __m256 b = _mm256_permutevar8x32_ps(hi, idx);
  return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
}

// TurboQuant decoders: out[j] = (levels * scale)[idx_j]; `lv` is the codebook zero-padded to 16.
// b = 4, d % 16 == 0: byte c = idx[c] | idx[c + d/2] << 4.
TQ_AVX2_INLINE void decode4(const uint8_t* codes, int d, const float* lv, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(lv), s), hi = _mm256_mul_ps(_mm256_loadu_ps(lv + 8), s);
  const __m256i m4 = _mm256_set1_epi32(15);
  const int half = d / 2;
  for (int c = 0; c < half; c += 8) {
    const __m256i bytes = load8_u8(codes + c);
    _mm256_storeu_ps(out + c, lut16(lo, hi, _mm256_and_si256(bytes, m4)));
    _mm256_storeu_ps(out + c + half, lut16(lo, hi, _mm256_srli_epi32(bytes, 4)));
  }
}

// b = 2, d % 32 == 0: byte c (c < d/4) holds idx[c + k*d/4] at bits 2k.
TQ_AVX2_INLINE void decode2(const uint8_t* codes, int d, const float* lv, float scale, float* out) {
  const __m256 l = _mm256_mul_ps(_mm256_loadu_ps(lv), _mm256_set1_ps(scale));
  const __m256i m2 = _mm256_set1_epi32(3);
  const int s = d / 4;
  for (int c = 0; c < s; c += 8) {
    const __m256i bytes = load8_u8(codes + c);
    for (int k = 0; k < 4; ++k) {
      const __m256i idx = _mm256_and_si256(_mm256_srl_epi32(bytes, _mm_cvtsi32_si128(2 * k)), m2);
      _mm256_storeu_ps(out + c + k * s, _mm256_permutevar8x32_ps(l, idx));
    }
  }
}

// b = 3, d % 64 == 0: low two bits in the 2-bit layout (bytes [0, d/4)), high bit in the 1-bit
// layout (bytes [d/4, d/4 + d/8)). Coordinate j = c + k*d/4 (c < d/4) has its high bit in 1-bit
// byte j mod d/8 at bit j div d/8, i.e. byte c at bit 2k when c < d/8, else byte c - d/8 at
// bit 2k+1. With d % 64 == 0 a run of 8 bytes never straddles d/8.
TQ_AVX2_INLINE void decode3(const uint8_t* codes, int d, const float* lv, float scale, float* out) {
  const __m256 l = _mm256_mul_ps(_mm256_loadu_ps(lv), _mm256_set1_ps(scale));
  const __m256i m2 = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
  const int s2 = d / 4, s1 = d / 8;
  const uint8_t* high = codes + s2;
  for (int c = 0; c < s2; c += 8) {
    const __m256i lo = load8_u8(codes + c);
    const int second = c >= s1 ? 1 : 0;
    const __m256i hb = load8_u8(high + c - second * s1);
    for (int k = 0; k < 4; ++k) {
      const __m256i low2 = _mm256_and_si256(_mm256_srl_epi32(lo, _mm_cvtsi32_si128(2 * k)), m2);
      const __m256i top = _mm256_and_si256(_mm256_srl_epi32(hb, _mm_cvtsi32_si128(2 * k + second)), one);
      _mm256_storeu_ps(out + c + k * s2, _mm256_permutevar8x32_ps(l, _mm256_or_si256(low2, _mm256_slli_epi32(top, 2))));
    }
  }
}

// The bit width with a SIMD decoder for d coordinates, or 0 (scalar decoder).
int tq_simd_bits(int bits, int d) {
  if (bits == 4 && d % 16 == 0) return 4;
  if (bits == 2 && d % 32 == 0) return 2;
  if (bits == 3 && d % 64 == 0) return 3;
  return 0;
}

// Decodes the d codes of one TurboQuant part (scale * levels[idx]); the choice of decoder and its
// aligned copy of the codebook are set up once for any number of rows. The decoders are inlined
// into the caller's row loop: a call per row (64 coordinates at head_dim 64) cost more than the
// decoding, and its speed moved with where the linker happened to place the function.
struct TqPartDecoder {
  int d, bits, simd_bits;
  const float* levels;
  alignas(32) float lv[16] = {};
  TqPartDecoder(int d_, int bits_, const float* levels_)
      : d(d_), bits(bits_), simd_bits(tq_simd_bits(bits_, d_)), levels(levels_) {
    if (simd_bits) std::memcpy(lv, levels, sizeof(float) << bits);
  }
  TQ_AVX2_INLINE void operator()(const uint8_t* codes, float scale, float* out) const {
    switch (simd_bits) {
      case 4: decode4(codes, d, lv, scale, out); return;
      case 3: decode3(codes, d, lv, scale, out); return;
      case 2: decode2(codes, d, lv, scale, out); return;
      default: decode_tq_scalar(codes, d, bits, levels, scale, out); return;
    }
  }
};

// One channel-bit part of 8k coordinates: the indices unpacked as in the scalar decoder, the
// levels (times the scale, one rounding as there) looked up 8 at a time.
TQ_AVX2 void decode_channel_part(const uint8_t* codes, int dim, int bits, const float* levels, float scale, float* out) {
  if (bits == 0) {
    for (int j = 0; j < dim; j += 8) _mm256_storeu_ps(out + j, _mm256_setzero_ps());
    return;
  }
  uint8_t idx[kMaxDim];
  unpack_channel_part(codes, dim, bits, idx);
  const __m256 s = _mm256_set1_ps(scale);
  for (int j = 0; j < dim; j += 8)
    _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_i32gather_ps(levels, load8_u8(idx + j), 4), s));
}

// tq4p: 8 codes at a time, each point's x and y gathered and scaled (one rounded product each, as
// the scalar decoder); a tail of fewer than 8 pairs decoded by the scalar loop.
TQ_AVX2 void decode_pairs(const uint8_t* codes, int d, const float* points, float scale, float* out) {
  const int h = d / 2;
  const __m256 s = _mm256_set1_ps(scale);
  int c = 0;
  for (; c + 8 <= h; c += 8) {
    const __m256i at = _mm256_slli_epi32(load8_u8(codes + c), 1);
    _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_i32gather_ps(points, at, 4), s));
    _mm256_storeu_ps(out + c + h, _mm256_mul_ps(_mm256_i32gather_ps(points + 1, at, 4), s));
  }
  decode_pairs_scalar(codes, d, points, scale, out, c);
}

TQ_AVX2 void decode_q8_0(const uint8_t* row, int d, float* out) {
  for (int b = 0; b < d / kBlock; ++b, row += sizeof(BlockQ8_0), out += kBlock) {
    const __m256 s = _mm256_set1_ps(fp16_at(row + offsetof(BlockQ8_0, d)));
    const uint8_t* qs = row + offsetof(BlockQ8_0, qs);
    for (int j = 0; j < kBlock; j += 8) {
      const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + j)));
      _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_cvtepi32_ps(q), s));
    }
  }
}

TQ_AVX2 void decode_q4_0(const uint8_t* row, int d, float* out) {
  const __m256i m4 = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
  for (int b = 0; b < d / kBlock; ++b, row += sizeof(BlockQ4_0), out += kBlock) {
    const __m256 s = _mm256_set1_ps(fp16_at(row + offsetof(BlockQ4_0, d)));
    const uint8_t* qs = row + offsetof(BlockQ4_0, qs);
    for (int j = 0; j < 16; j += 8) {
      const __m256i bytes = load8_u8(qs + j);
      const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(bytes, m4), eight);
      const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(bytes, 4), eight);
      _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_cvtepi32_ps(lo), s));
      _mm256_storeu_ps(out + j + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(hi), s));
    }
  }
}

TQ_AVX2 void decode_f16(const uint8_t* row, int d, float* out) {
  int j = 0;
  for (; j + 8 <= d; j += 8)
    _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * j))));
  for (; j < d; ++j) out[j] = fp16_at(row + 2 * j);
}

TQ_AVX2 void decode_bf16(const uint8_t* row, int d, float* out) {
  int j = 0;
  for (; j + 8 <= d; j += 8) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * j)));
    _mm256_storeu_ps(out + j, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
  }
  for (; j < d; ++j) {
    uint16_t h;
    std::memcpy(&h, row + 2 * j, 2);
    out[j] = bf16_to_fp32(h);
  }
}

bool cpu_has_avx2() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return ok;
}

}  // namespace

bool coded_row_avx2_available(const CodedRowFormat& f) { return cpu_has_avx2() && f.dim > 0 && f.dim % 8 == 0; }

void decode_coded_row_avx2(const CodedRowFormat& f, const uint8_t* row, float* out) {
  decode_coded_rows_avx2(f, row, 0, 1, out, 0);
}

TQ_AVX2 void decode_coded_rows_avx2(const CodedRowFormat& f, const uint8_t* first, size_t row_stride, int n, float* out,
                            size_t out_stride) {
  const int d = f.dim;
  // One dispatch (and for TurboQuant one codebook set-up) for all n rows.
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
      const TqPartDecoder part(d, f.bits, f.levels);
      for (int i = 0; i < n; ++i) {
        const uint8_t* row = first + i * row_stride;
        part(row, tq_scale(f, row), out + i * out_stride);
      }
      return;
    }
    case RowCodec::TQ_SPLIT: {
      const int h = d / 2;
      const size_t hi_bytes = codes_bytes(h, f.bits), codes = hi_bytes + codes_bytes(h, f.bits_lo);
      const TqPartDecoder high(h, f.bits, f.levels), low(h, f.bits_lo, f.levels_lo);
      for (int i = 0; i < n; ++i) {
        const uint8_t* row = first + i * row_stride;
        high(row, fp16_at(row + codes), out + i * out_stride);
        low(row + hi_bytes, fp16_at(row + codes + 2), out + i * out_stride + h);
      }
      return;
    }
    case RowCodec::TQ_CHANNELS: {
      const size_t codes = channel_codes_bytes(f);
      for (int i = 0; i < n; ++i) {
        const uint8_t* row = first + i * row_stride;
        const float scale = fp16_at(row + codes);
        float* o = out + i * out_stride;
        for (int p = 0; p < f.parts; o += f.part_dims[p], ++p) {
          decode_channel_part(row, f.part_dims[p], f.part_bits[p], f.part_levels[p], scale, o);
          row += size_t(f.part_dims[p]) * f.part_bits[p] / 8;
        }
      }
      return;
    }
    case RowCodec::TQ_PAIRS:
      for (int i = 0; i < n; ++i) {
        const uint8_t* row = first + i * row_stride;
        decode_pairs(row, d, f.levels, fp16_at(row + d / 2), out + i * out_stride);
      }
      return;
    case RowCodec::TQ_ORTHANT: {
      // The scalar decoder: on AVX-512 machines decode_coded_rows_avx512 gathers them instead.
      const size_t scale_at = orthant_scale_offset(d, f.bits);
      for (int i = 0; i < n; ++i) {
        const uint8_t* row = first + i * row_stride;
        decode_orthant_scalar(row, d, f.bits, f.levels, fp16_at(row + scale_at), out + i * out_stride);
      }
      return;
    }
  }
}

#else  // !TQ_HAVE_X86

bool coded_row_avx2_available(const CodedRowFormat&) { return false; }
void decode_coded_row_avx2(const CodedRowFormat& f, const uint8_t* row, float* out) {
  decode_coded_row_scalar(f, row, out);
}
void decode_coded_rows_avx2(const CodedRowFormat& f, const uint8_t* first, size_t row_stride, int n, float* out,
                            size_t out_stride) {
  for (int i = 0; i < n; ++i) decode_coded_row_scalar(f, first + i * row_stride, out + i * out_stride);
}

#endif

}  // namespace tq
