// Dequantization of ggml block formats (layouts: kernels/ggml_blocks.h); the arithmetic
// follows ggml's reference dequantize_row_* so the results are bit-identical to ggml and to the
// `gguf` Python package. Why that holds even with FMA contraction: an fp16 scale has 11
// significant bits and the quants/sub-scales at most 8, so every product before the final
// rounding (d * sub_scale, then * q) fits in fp32's 24 bits exactly, leaving a single rounded
// operation per value. The one exception is Q6_K (d * int8 scale * 6-bit q can need 25 bits),
// where ggml's order, (d * scale) * q, is kept.
#include "kernels/dequantize.h"

#include <bit>
#include <cstring>

#include "errors/error.h"
#include "kernels/ggml_blocks.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tq {

static_assert(std::endian::native == std::endian::little,
              "ggml block layouts are little-endian; a big-endian host needs byte swaps");

namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr int kQK = 32;  // elements per block of the legacy formats (q4_0 ... q8_0)

// --- legacy 32-element blocks ------------------------------------------------------------
// In all of them byte j of qs holds element j in its low nibble and element j + 16 in its high.

void dequant_q4_0(const uint8_t* block, float* out) {
  const float d = fp16_at(block + offsetof(BlockQ4_0, d));
  const uint8_t* qs = block + offsetof(BlockQ4_0, qs);
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    out[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequant_q4_1(const uint8_t* block, float* out) {
  const float d = fp16_at(block + offsetof(BlockQ4_1, d));
  const float m = fp16_at(block + offsetof(BlockQ4_1, m));
  const uint8_t* qs = block + offsetof(BlockQ4_1, qs);
  for (int j = 0; j < kQK / 2; ++j) {
    out[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    out[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Fifth bits: bit j of the 32-bit qh is the high bit of element j.
int fifth_bit(uint32_t qh, int element) { return static_cast<int>((qh >> element) & 1u) << 4; }

void dequant_q5_0(const uint8_t* block, float* out) {
  const float d = fp16_at(block + offsetof(BlockQ5_0, d));
  const uint32_t qh = load_u32(block + offsetof(BlockQ5_0, qh));
  const uint8_t* qs = block + offsetof(BlockQ5_0, qs);
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = ((qs[j] & 0x0F) | fifth_bit(qh, j)) - 16;
    const int hi = ((qs[j] >> 4) | fifth_bit(qh, j + kQK / 2)) - 16;
    out[j] = static_cast<float>(lo) * d;
    out[j + kQK / 2] = static_cast<float>(hi) * d;
  }
}

void dequant_q5_1(const uint8_t* block, float* out) {
  const float d = fp16_at(block + offsetof(BlockQ5_1, d));
  const float m = fp16_at(block + offsetof(BlockQ5_1, m));
  const uint32_t qh = load_u32(block + offsetof(BlockQ5_1, qh));
  const uint8_t* qs = block + offsetof(BlockQ5_1, qs);
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = (qs[j] & 0x0F) | fifth_bit(qh, j);
    const int hi = (qs[j] >> 4) | fifth_bit(qh, j + kQK / 2);
    out[j] = static_cast<float>(lo) * d + m;
    out[j + kQK / 2] = static_cast<float>(hi) * d + m;
  }
}

void dequant_q8_0(const uint8_t* block, float* out) {
  const float d = fp16_at(block + offsetof(BlockQ8_0, d));
  const uint8_t* qs = block + offsetof(BlockQ8_0, qs);
  for (int j = 0; j < kQK; ++j) {
    out[j] = static_cast<float>(static_cast<int8_t>(qs[j])) * d;
  }
}

// --- K-quants: 256-element super-blocks of 16 or 8 sub-blocks ------------------------------

void dequant_q2_k(const uint8_t* block, float* out) {
  const uint8_t* scales = block + offsetof(BlockQ2_K, scales);
  const uint8_t* qs = block + offsetof(BlockQ2_K, qs);
  const float d = fp16_at(block + offsetof(BlockQ2_K, d));
  const float dmin = fp16_at(block + offsetof(BlockQ2_K, dmin));
  int sub = 0;
  // Each 128-element half uses 32 bytes of qs; the four 2-bit planes of those bytes are four
  // consecutive 32-element runs, each run split into two 16-element sub-blocks.
  for (int half = 0; half < 2; ++half, qs += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++sub) {
        const float dl = d * static_cast<float>(scales[sub] & 0x0F);
        const float ml = dmin * static_cast<float>(scales[sub] >> 4);
        for (int l = 0; l < 16; ++l) {
          const int q = (qs[part * 16 + l] >> shift) & 3;
          *out++ = dl * static_cast<float>(q) - ml;
        }
      }
    }
  }
}

// Q3_K packs sixteen 6-bit scales into 12 bytes: low nibbles in bytes 0..7 (sub-block k < 8
// in the low nibble of byte k, k >= 8 in the high nibble of byte k - 8), the top two bits in
// bytes 8..11 (sub-block k at byte 8 + k % 4, bit 2 * (k / 4)). Stored with a +32 bias.
int q3_k_scale(const uint8_t* scales, int k) {
  const int low = k < 8 ? (scales[k] & 0x0F) : (scales[k - 8] >> 4);
  const int high = (scales[8 + k % 4] >> (2 * (k / 4))) & 3;
  return (low | (high << 4)) - 32;
}

void dequant_q3_k(const uint8_t* block, float* out) {
  const uint8_t* hmask = block + offsetof(BlockQ3_K, hmask);
  const uint8_t* qs = block + offsetof(BlockQ3_K, qs);
  const uint8_t* scales = block + offsetof(BlockQ3_K, scales);
  const float d = fp16_at(block + offsetof(BlockQ3_K, d));
  int sub = 0;
  int hbit = 0;  // bit of hmask[l] that belongs to the current 32-element run
  for (int half = 0; half < 2; ++half, qs += 32) {
    for (int shift = 0; shift < 8; shift += 2, ++hbit) {
      for (int part = 0; part < 2; ++part, ++sub) {
        const float dl = d * static_cast<float>(q3_k_scale(scales, sub));
        for (int l = 0; l < 16; ++l) {
          const int idx = part * 16 + l;
          const int low = (qs[idx] >> shift) & 3;
          // A clear high bit means "subtract 4": values span -4..3.
          const int q = low - (((hmask[idx] >> hbit) & 1) ? 0 : 4);
          *out++ = dl * static_cast<float>(q);
        }
      }
    }
  }
}

void dequant_q4_k(const uint8_t* block, float* out) {
  // 32 bytes of qs per 64 elements, low nibbles first (sub-block 2i), then high nibbles
  // (sub-block 2i + 1).
  const float d = fp16_at(block + offsetof(BlockQ4_K, d));
  const float dmin = fp16_at(block + offsetof(BlockQ4_K, dmin));
  const uint8_t* scales = block + offsetof(BlockQ4_K, scales);
  const uint8_t* qs = block + offsetof(BlockQ4_K, qs);
  for (int pair = 0; pair < 4; ++pair, qs += 32) {
    int sc_lo, m_lo, sc_hi, m_hi;
    k4_scale_min(scales, 2 * pair, &sc_lo, &m_lo);
    k4_scale_min(scales, 2 * pair + 1, &sc_hi, &m_hi);
    const float d_lo = d * static_cast<float>(sc_lo), min_lo = dmin * static_cast<float>(m_lo);
    const float d_hi = d * static_cast<float>(sc_hi), min_hi = dmin * static_cast<float>(m_hi);
    for (int l = 0; l < 32; ++l) *out++ = d_lo * static_cast<float>(qs[l] & 0x0F) - min_lo;
    for (int l = 0; l < 32; ++l) *out++ = d_hi * static_cast<float>(qs[l] >> 4) - min_hi;
  }
}

void dequant_q5_k(const uint8_t* block, float* out) {
  // As Q4_K, plus a fifth bit per element in qh[l], bit 2i for sub-block 2i and bit 2i + 1 for
  // sub-block 2i + 1.
  const float d = fp16_at(block + offsetof(BlockQ5_K, d));
  const float dmin = fp16_at(block + offsetof(BlockQ5_K, dmin));
  const uint8_t* scales = block + offsetof(BlockQ5_K, scales);
  const uint8_t* qh = block + offsetof(BlockQ5_K, qh);
  const uint8_t* qs = block + offsetof(BlockQ5_K, qs);
  for (int pair = 0; pair < 4; ++pair, qs += 32) {
    int sc_lo, m_lo, sc_hi, m_hi;
    k4_scale_min(scales, 2 * pair, &sc_lo, &m_lo);
    k4_scale_min(scales, 2 * pair + 1, &sc_hi, &m_hi);
    const float d_lo = d * static_cast<float>(sc_lo), min_lo = dmin * static_cast<float>(m_lo);
    const float d_hi = d * static_cast<float>(sc_hi), min_hi = dmin * static_cast<float>(m_hi);
    const int bit_lo = 2 * pair, bit_hi = 2 * pair + 1;
    for (int l = 0; l < 32; ++l) {
      const int q = (qs[l] & 0x0F) | (((qh[l] >> bit_lo) & 1) << 4);
      *out++ = d_lo * static_cast<float>(q) - min_lo;
    }
    for (int l = 0; l < 32; ++l) {
      const int q = (qs[l] >> 4) | (((qh[l] >> bit_hi) & 1) << 4);
      *out++ = d_hi * static_cast<float>(q) - min_hi;
    }
  }
}

void dequant_q6_k(const uint8_t* block, float* out) {
  // Per 128-element half: 64 bytes of ql (low nibbles of bytes 0..31 -> elements 0..31, of
  // 32..63 -> 32..63, high nibbles -> 64..127) and 32 bytes of qh whose four 2-bit planes give
  // the top bits of those four runs.
  const uint8_t* ql = block + offsetof(BlockQ6_K, ql);
  const uint8_t* qh = block + offsetof(BlockQ6_K, qh);
  const int8_t* scales = reinterpret_cast<const int8_t*>(block + offsetof(BlockQ6_K, scales));
  const float d = fp16_at(block + offsetof(BlockQ6_K, d));
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, scales += 8, out += 128) {
    for (int l = 0; l < 32; ++l) {
      const int sub = l / 16;
      const int q0 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q1 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      out[l] = d * static_cast<float>(scales[sub + 0]) * static_cast<float>(q0);
      out[l + 32] = d * static_cast<float>(scales[sub + 2]) * static_cast<float>(q1);
      out[l + 64] = d * static_cast<float>(scales[sub + 4]) * static_cast<float>(q2);
      out[l + 96] = d * static_cast<float>(scales[sub + 6]) * static_cast<float>(q3);
    }
  }
}

using BlockDequantizer = void (*)(const uint8_t* block, float* out);

template <class Block, BlockDequantizer kDequant>
void dequant_blocks(const void* src, float* dst, int64_t n) {
  const auto* bytes = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / Block::kValues; ++b) {
    kDequant(bytes + b * sizeof(Block), dst + b * Block::kValues);
  }
}

}  // namespace

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24 is exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | sign);
  }
  if (exponent == 0x1F) {  // inf, or NaN with its payload kept
    return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  }
  return std::bit_cast<float>(sign | ((exponent + (127 - 15)) << 23) | (mantissa << 13));
}

float fp16_at(const uint8_t* p) { return fp16_to_fp32(load_u16(p)); }

uint16_t fp32_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) {  // NaN: quiet it, keep the top payload bits
    return static_cast<uint16_t>(sign | 0x7E00u | ((magnitude >> 13) & 0x3FFu));
  }
  // 65520 (0x477FF000) lies halfway between the largest half, 65504, and 2^16; ties go to
  // the even neighbour, which is the overflow to infinity.
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): the result is round(|f| * 2^24) ulps of 2^-24.
    const uint32_t exponent = magnitude >> 23;
    if (exponent < 102) return sign;  // |f| < 2^-25 rounds to zero (2^-25 itself ties to 0)
    const uint32_t significand = (magnitude & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exponent;  // 14..24
    uint32_t q = significand >> shift;
    const uint32_t rest = significand & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias the exponent, drop 13 mantissa bits with round-to-nearest-even. A carry
  // out of the mantissa correctly bumps the exponent.
  uint32_t h = (magnitude - ((127u - 15u) << 23)) >> 13;
  const uint32_t rest = magnitude & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

#if defined(__x86_64__) || defined(__i386__)
// F16C rounds to nearest even, overflows to infinity, rounds subnormals exactly and quiets a NaN
// keeping its top payload bits: fp32_to_fp16's results (tests/cpp/kernels/test_dequantize.cpp).
__attribute__((target("avx,f16c"))) static void fp32_to_fp16_f16c(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}
#endif

void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  if (f16c) return fp32_to_fp16_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
    // Truncating could clear every payload bit and turn NaN into inf; force the quiet bit.
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((static_cast<uint64_t>(bits) + rounding) >> 16);
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const DTypeTraits& traits = dtype_traits(type);
  if (!traits.supported) fail("dequantize_row: weight type {} is not supported", traits.name);
  if (n < 0 || n % traits.block_elems != 0) {
    fail("dequantize_row: {} elements of {} are not a whole number of {}-element blocks", n,
         traits.name, traits.block_elems);
  }
  switch (type) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      const auto* bytes = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_at(bytes + 2 * i);
      return;
    }
    case DType::BF16: {
      const auto* bytes = static_cast<const uint8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(load_u16(bytes + 2 * i));
      return;
    }
    case DType::Q4_0: return dequant_blocks<BlockQ4_0, dequant_q4_0>(src, dst, n);
    case DType::Q4_1: return dequant_blocks<BlockQ4_1, dequant_q4_1>(src, dst, n);
    case DType::Q5_0: return dequant_blocks<BlockQ5_0, dequant_q5_0>(src, dst, n);
    case DType::Q5_1: return dequant_blocks<BlockQ5_1, dequant_q5_1>(src, dst, n);
    case DType::Q8_0: return dequant_blocks<BlockQ8_0, dequant_q8_0>(src, dst, n);
    case DType::Q2_K: return dequant_blocks<BlockQ2_K, dequant_q2_k>(src, dst, n);
    case DType::Q3_K: return dequant_blocks<BlockQ3_K, dequant_q3_k>(src, dst, n);
    case DType::Q4_K: return dequant_blocks<BlockQ4_K, dequant_q4_k>(src, dst, n);
    case DType::Q5_K: return dequant_blocks<BlockQ5_K, dequant_q5_k>(src, dst, n);
    case DType::Q6_K: return dequant_blocks<BlockQ6_K, dequant_q6_k>(src, dst, n);
    default:
      break;
  }
  fail("dequantize_row: weight type {} has no dequantizer", traits.name);
}

}  // namespace tq
