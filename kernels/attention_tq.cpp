#include "kernels/attention_tq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "errors/error.h"
#include "kernels/tq_packing.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_HAVE_X86 1
#else
#define TQ_HAVE_X86 0
#endif

namespace tq {
namespace {

constexpr int kMaxHeadDim = 512;
constexpr int kMaxGroup = 64;  // query heads per KV head

void check_args(const TqAttentionArgs& a) {
  if (a.n_q_heads <= 0 || a.n_kv_heads <= 0 || a.n_q_heads % a.n_kv_heads != 0) {
    fail("TurboQuant attention: n_q_heads ({}) must be a positive multiple of n_kv_heads ({})",
         a.n_q_heads, a.n_kv_heads);
  }
  if (a.n_q_heads / a.n_kv_heads > kMaxGroup) {
    fail("TurboQuant attention: {} query heads per KV head, at most {} supported",
         a.n_q_heads / a.n_kv_heads, kMaxGroup);
  }
  if (a.head_dim <= 0 || a.head_dim > kMaxHeadDim) {
    fail("TurboQuant attention: head_dim {} must be in 1..{}", a.head_dim, kMaxHeadDim);
  }
  check_tq_row_shape(a.head_dim, a.k_bits);
  check_tq_row_shape(a.head_dim, a.v_bits);
  if (a.n_ctx < 0) fail("TurboQuant attention: n_ctx {} is negative", a.n_ctx);
  if (a.n_ctx > 0 && a.block_size <= 0) {
    fail("TurboQuant attention: block_size {} must be positive", a.block_size);
  }
  if (!a.q_rot || !a.out_rot || !a.k_codebook || !a.v_codebook ||
      (a.n_ctx > 0 && (!a.block_table || !a.k.base || !a.v.base))) {
    fail("TurboQuant attention: a required pointer argument is null");
  }
}

inline const uint8_t* row_ptr(const TqPagedRows& rows, int32_t block, int g, int offset) {
  return rows.base + size_t(block) * rows.block_stride + size_t(g) * rows.head_stride +
         size_t(offset) * rows.row_stride;
}

inline float load_scale(const uint8_t* row, size_t codes_bytes) {
  float s;
  std::memcpy(&s, row + codes_bytes, sizeof(float));
  return s;
}

// Unscaled levels of a row, out[j] = codebook[idx_j] (scalar path).
inline void decode_levels_scalar(const uint8_t* codes, int d, int bits, const float* codebook,
                                 uint8_t* idx, float* out) {
  unpack_indices(codes, d, bits, idx);
  for (int j = 0; j < d; ++j) out[j] = codebook[idx[j]];
}

}  // namespace

void paged_attention_tq_scalar(const TqAttentionArgs& a) {
  check_args(a);
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  const size_t k_codes = tq_codes_bytes(d, a.k_bits), v_codes = tq_codes_bytes(d, a.v_bits);
  uint8_t idx[kMaxHeadDim];
  float k_lv[kMaxHeadDim], v_lv[kMaxHeadDim];
  float running_max[kMaxGroup], running_sum[kMaxGroup], score[kMaxGroup];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  for (int g = 0; g < a.n_kv_heads; ++g) {
    const float* q_group = a.q_rot + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(running_max, running_max + group, -std::numeric_limits<float>::infinity());
    std::fill(running_sum, running_sum + group, 0.0f);
    for (int t = 0; t < a.n_ctx; ++t) {
      const int32_t block = a.block_table[t / a.block_size];
      const int offset = t % a.block_size;
      const uint8_t* k_row = row_ptr(a.k, block, g, offset);
      const uint8_t* v_row = row_ptr(a.v, block, g, offset);
      // Decode the K row once (levels only, no rotation) for the whole group.
      decode_levels_scalar(k_row, d, a.k_bits, a.k_codebook, idx, k_lv);
      const float k_mul = load_scale(k_row, k_codes) * a.scale;
      for (int h = 0; h < group; ++h) {
        const float* q = q_group + size_t(h) * d;
        float dot = 0;
        for (int j = 0; j < d; ++j) dot += q[j] * k_lv[j];
        score[h] = dot * k_mul;
      }
      decode_levels_scalar(v_row, d, a.v_bits, a.v_codebook, idx, v_lv);
      const float v_scale = load_scale(v_row, v_codes);
      for (int h = 0; h < group; ++h) {
        float* acc_h = acc.data() + size_t(h) * d;
        float weight;
        if (score[h] > running_max[h]) {
          const float correction = std::exp(running_max[h] - score[h]);
          running_sum[h] *= correction;
          for (int j = 0; j < d; ++j) acc_h[j] *= correction;
          running_max[h] = score[h];
          weight = 1.0f;
        } else {
          weight = std::exp(score[h] - running_max[h]);
        }
        running_sum[h] += weight;
        const float w = weight * v_scale;
        for (int j = 0; j < d; ++j) acc_h[j] += w * v_lv[j];
      }
    }
    for (int h = 0; h < group; ++h) {
      float* out = a.out_rot + (size_t(g) * group + h) * d;
      const float inv = running_sum[h] > 0 ? 1.0f / running_sum[h] : 0.0f;
      for (int j = 0; j < d; ++j) out[j] = acc[size_t(h) * d + j] * inv;
    }
  }
}

#if TQ_HAVE_X86

namespace {

#define TQ_AVX2 __attribute__((target("avx2,fma")))
#define TQ_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

// 8 consecutive code bytes, zero-extended to 32-bit lanes.
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

// Row decoders: out[j] = cb[idx_j] for j < d (levels only). cb is the codebook zero-padded to 16.
// b = 4, d % 16 == 0: byte c = idx[c] | idx[c + d/2] << 4.
TQ_AVX2 void decode4_avx2(const uint8_t* codes, int d, const float* cb, float* out) {
  const __m256 lo = _mm256_loadu_ps(cb), hi = _mm256_loadu_ps(cb + 8);
  const __m256i m4 = _mm256_set1_epi32(15);
  const int half = d / 2;
  for (int c = 0; c < half; c += 8) {
    const __m256i bytes = load8_u8(codes + c);
    _mm256_storeu_ps(out + c, lut16(lo, hi, _mm256_and_si256(bytes, m4)));
    _mm256_storeu_ps(out + c + half, lut16(lo, hi, _mm256_srli_epi32(bytes, 4)));
  }
}

// b = 2, d % 32 == 0: byte c (c < d/4) holds idx[c + k*d/4] at bits 2k.
TQ_AVX2 void decode2_avx2(const uint8_t* codes, int d, const float* cb, float* out) {
  const __m256 lv = _mm256_loadu_ps(cb);  // levels 0..3 in lanes 0..3
  const __m256i m2 = _mm256_set1_epi32(3);
  const int s = d / 4;
  for (int c = 0; c < s; c += 8) {
    const __m256i bytes = load8_u8(codes + c);
    _mm256_storeu_ps(out + c, _mm256_permutevar8x32_ps(lv, _mm256_and_si256(bytes, m2)));
    _mm256_storeu_ps(out + c + s, _mm256_permutevar8x32_ps(
                                      lv, _mm256_and_si256(_mm256_srli_epi32(bytes, 2), m2)));
    _mm256_storeu_ps(out + c + 2 * s, _mm256_permutevar8x32_ps(
                                          lv, _mm256_and_si256(_mm256_srli_epi32(bytes, 4), m2)));
    _mm256_storeu_ps(out + c + 3 * s,
                     _mm256_permutevar8x32_ps(lv, _mm256_srli_epi32(bytes, 6)));
  }
}

// b = 3, d % 64 == 0: low two bits in the 2-bit layout (bytes [0, d/4)), high bit in the 1-bit
// layout (bytes [d/4, d/4 + d/8)). Coordinate j = c + k*d/4 (c < d/4) has its high bit in 1-bit
// byte j mod d/8 at bit j div d/8, i.e. byte c at bit 2k when c < d/8, else byte c - d/8 at
// bit 2k+1. With d % 64 == 0 a run of 8 bytes never straddles d/8.
TQ_AVX2 void decode3_avx2(const uint8_t* codes, int d, const float* cb, float* out) {
  const __m256 lv = _mm256_loadu_ps(cb);  // 8 levels
  const __m256i m2 = _mm256_set1_epi32(3), one = _mm256_set1_epi32(1);
  const int s2 = d / 4, s1 = d / 8;
  const uint8_t* high = codes + s2;
  for (int c = 0; c < s2; c += 8) {
    const __m256i lo = load8_u8(codes + c);
    const int second = c >= s1 ? 1 : 0;
    const __m256i hb = load8_u8(high + c - second * s1);
    for (int k = 0; k < 4; ++k) {
      const __m128i lo_shift = _mm_cvtsi32_si128(2 * k);
      const __m128i hi_shift = _mm_cvtsi32_si128(2 * k + second);
      const __m256i low2 = _mm256_and_si256(_mm256_srl_epi32(lo, lo_shift), m2);
      const __m256i top = _mm256_and_si256(_mm256_srl_epi32(hb, hi_shift), one);
      const __m256i idx = _mm256_or_si256(low2, _mm256_slli_epi32(top, 2));
      _mm256_storeu_ps(out + c + k * s2, _mm256_permutevar8x32_ps(lv, idx));
    }
  }
}

TQ_AVX2_INLINE float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// d % 8 == 0.
TQ_AVX2_INLINE float dot_avx2(const float* a, const float* b, int d) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(),
         s3 = _mm256_setzero_ps();
  int j = 0;
  for (; j + 32 <= d; j += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 8), _mm256_loadu_ps(b + j + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 16), _mm256_loadu_ps(b + j + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j + 24), _mm256_loadu_ps(b + j + 24), s3);
  }
  for (; j < d; j += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), s0);
  return hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

using DecodeFn = void (*)(const uint8_t*, int, const float*, float*);

// The SIMD decoder for (bits, d), or null when the scalar decode must be used.
DecodeFn simd_decoder(int bits, int d) {
  if (bits == 4 && d % 16 == 0) return decode4_avx2;
  if (bits == 2 && d % 32 == 0) return decode2_avx2;
  if (bits == 3 && d % 64 == 0) return decode3_avx2;
  return nullptr;
}

TQ_AVX2 void attention_avx2_impl(const TqAttentionArgs& a) {
  const int d = a.head_dim;
  const int group = a.n_q_heads / a.n_kv_heads;
  const size_t k_codes = tq_codes_bytes(d, a.k_bits), v_codes = tq_codes_bytes(d, a.v_bits);
  const DecodeFn k_dec = simd_decoder(a.k_bits, d), v_dec = simd_decoder(a.v_bits, d);
  alignas(32) float k_cb[16] = {}, v_cb[16] = {};
  std::copy(a.k_codebook, a.k_codebook + (1 << a.k_bits), k_cb);
  std::copy(a.v_codebook, a.v_codebook + (1 << a.v_bits), v_cb);
  uint8_t idx[kMaxHeadDim];
  alignas(32) float k_lv[kMaxHeadDim], v_lv[kMaxHeadDim];
  float running_max[kMaxGroup], running_sum[kMaxGroup], score[kMaxGroup];
  std::vector<float> acc(size_t(group) * d);  // [group, d]
  for (int g = 0; g < a.n_kv_heads; ++g) {
    const float* q_group = a.q_rot + size_t(g) * group * d;
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(running_max, running_max + group, -std::numeric_limits<float>::infinity());
    std::fill(running_sum, running_sum + group, 0.0f);
    for (int t = 0; t < a.n_ctx; ++t) {
      const int32_t block = a.block_table[t / a.block_size];
      const int offset = t % a.block_size;
      const uint8_t* k_row = row_ptr(a.k, block, g, offset);
      const uint8_t* v_row = row_ptr(a.v, block, g, offset);
      if (k_dec) {
        k_dec(k_row, d, k_cb, k_lv);
      } else {
        decode_levels_scalar(k_row, d, a.k_bits, k_cb, idx, k_lv);
      }
      const float k_mul = load_scale(k_row, k_codes) * a.scale;
      for (int h = 0; h < group; ++h) score[h] = dot_avx2(q_group + size_t(h) * d, k_lv, d) * k_mul;
      if (v_dec) {
        v_dec(v_row, d, v_cb, v_lv);
      } else {
        decode_levels_scalar(v_row, d, a.v_bits, v_cb, idx, v_lv);
      }
      const float v_scale = load_scale(v_row, v_codes);
      for (int h = 0; h < group; ++h) {
        float* acc_h = acc.data() + size_t(h) * d;
        float weight;
        if (score[h] > running_max[h]) {
          const float correction = std::exp(running_max[h] - score[h]);
          running_sum[h] *= correction;
          running_max[h] = score[h];
          weight = 1.0f;
          running_sum[h] += weight;
          const __m256 c = _mm256_set1_ps(correction), w = _mm256_set1_ps(weight * v_scale);
          for (int j = 0; j < d; j += 8) {
            const __m256 r = _mm256_mul_ps(_mm256_loadu_ps(acc_h + j), c);
            _mm256_storeu_ps(acc_h + j, _mm256_fmadd_ps(w, _mm256_load_ps(v_lv + j), r));
          }
        } else {
          weight = std::exp(score[h] - running_max[h]);
          running_sum[h] += weight;
          const __m256 w = _mm256_set1_ps(weight * v_scale);
          for (int j = 0; j < d; j += 8) {
            _mm256_storeu_ps(acc_h + j, _mm256_fmadd_ps(w, _mm256_load_ps(v_lv + j),
                                                        _mm256_loadu_ps(acc_h + j)));
          }
        }
      }
    }
    for (int h = 0; h < group; ++h) {
      float* out = a.out_rot + (size_t(g) * group + h) * d;
      const __m256 inv = _mm256_set1_ps(running_sum[h] > 0 ? 1.0f / running_sum[h] : 0.0f);
      for (int j = 0; j < d; j += 8) {
        _mm256_storeu_ps(out + j, _mm256_mul_ps(_mm256_loadu_ps(acc.data() + size_t(h) * d + j), inv));
      }
    }
  }
}

bool cpu_has_avx2_fma() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

}  // namespace

bool paged_attention_tq_avx2_available(int head_dim) {
  return cpu_has_avx2_fma() && head_dim > 0 && head_dim % 8 == 0;
}

void paged_attention_tq_avx2(const TqAttentionArgs& a) {
  check_args(a);
  if (!paged_attention_tq_avx2_available(a.head_dim)) {
    fail("TurboQuant attention: the AVX2 kernel needs an AVX2+FMA CPU and head_dim % 8 == 0 "
         "(head_dim {})", a.head_dim);
  }
  attention_avx2_impl(a);
}

void paged_attention_tq(const TqAttentionArgs& a) {
  if (paged_attention_tq_avx2_available(a.head_dim)) {
    paged_attention_tq_avx2(a);
  } else {
    paged_attention_tq_scalar(a);
  }
}

#else  // !TQ_HAVE_X86

bool paged_attention_tq_avx2_available(int) { return false; }

void paged_attention_tq_avx2(const TqAttentionArgs& a) {
  check_args(a);
  fail("TurboQuant attention: the AVX2 kernel is not built for this architecture");
}

void paged_attention_tq(const TqAttentionArgs& a) { paged_attention_tq_scalar(a); }

#endif

}  // namespace tq
