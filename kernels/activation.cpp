#include "kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as an unused merge source, which
// -Wmaybe-uninitialized reports once they are inlined under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

namespace tq {
namespace {

inline float silu_one(float g, float up) { return g / (1.0f + std::exp(-g)) * up; }

#if defined(__x86_64__) || defined(__i386__)
// glibc's expf (the FMA build every AVX-512 CPU gets): with N = 32, z = x * N/ln2 rounded to the
// integer k (ties to even, by adding and subtracting 1.5 * 2^52), r = z - k, and
// exp(x) = 2^(k/N) * (c0 r^3 + c1 r^2 + c2 r + 1), 2^(k/N) from the table entry of k mod N whose
// exponent field k / N is added into. All in double; one rounding to float at the end.
constexpr int kTableBits = 5, kTableSize = 1 << kTableBits;
constexpr double kInvLn2N = 0x1.71547652b82fep+0 * kTableSize;
constexpr double kShift = 0x1.8p+52;
constexpr double kC0 = 0x1.c6af84b912394p-5 / kTableSize / kTableSize / kTableSize;
constexpr double kC1 = 0x1.ebfce50fac4f3p-3 / kTableSize / kTableSize;
constexpr double kC2 = 0x1.62e42ff0c52d6p-1 / kTableSize;

// table[i] = bits of 2^(i/32) less i << 47, so that adding k << 47 puts k / 32 into the exponent.
struct Exp2Table {
  alignas(64) uint64_t bits[kTableSize];
  Exp2Table() {
    for (int i = 0; i < kTableSize; ++i) {
      const double v = static_cast<double>(std::exp2(static_cast<long double>(i) / kTableSize));
      std::memcpy(&bits[i], &v, sizeof v);
      bits[i] -= static_cast<uint64_t>(i) << (52 - kTableBits);
    }
  }
};
const Exp2Table& exp2_table() {
  static const Exp2Table table;
  return table;
}

// expf of 8 floats (as doubles) in the fast path's range |x| < 88.
__attribute__((target("avx512f,fma"), always_inline)) inline __m256 expf_8(__m512d xd, const __m512i (&table)[4]) {
  // glibc's FMA build fuses x * N/ln2 into both the rounding and r (this file is compiled with
  // -ffp-contract=off, so these are the only fused operations).
  const __m512d shifted = _mm512_fmadd_pd(xd, _mm512_set1_pd(kInvLn2N), _mm512_set1_pd(kShift));
  const __m512i ki = _mm512_castpd_si512(shifted);
  const __m512d kd = _mm512_sub_pd(shifted, _mm512_set1_pd(kShift));
  const __m512d r = _mm512_fmsub_pd(xd, _mm512_set1_pd(kInvLn2N), kd);
  // The entry of k mod 32: bits 0..3 pick within each half of the table, bit 4 picks the half.
  const __m512i low = _mm512_permutex2var_epi64(table[0], ki, table[1]);
  const __m512i high = _mm512_permutex2var_epi64(table[2], ki, table[3]);
  const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
  const __m512i entry = _mm512_mask_blend_epi64(upper, low, high);
  const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(entry, _mm512_slli_epi64(ki, 52 - kTableBits)));
  const __m512d c = _mm512_fmadd_pd(_mm512_set1_pd(kC0), r, _mm512_set1_pd(kC1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(kC2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(c, r2, y);
  return _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
}

// expf of 16 floats; false (nothing computed) when a lane is outside |x| < 88 or NaN, where glibc
// leaves its fast path.
__attribute__((target("avx512f,fma"), always_inline)) inline bool expf_16(__m512 x, const __m512i (&table)[4],
                                                                          __m512* out) {
  const __m512 magnitude = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
  if (_mm512_cmp_ps_mask(magnitude, _mm512_set1_ps(88.0f), _CMP_LT_OQ) != 0xFFFF) return false;
  const __m256 lo = expf_8(_mm512_cvtps_pd(_mm512_castps512_ps256(x)), table);
  const __m256 hi = expf_8(_mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))), table);
  *out = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
  return true;
}

__attribute__((target("avx512f,fma"))) void load_table(__m512i (&table)[4]) {
  const Exp2Table& t = exp2_table();
  for (int i = 0; i < 4; ++i) table[i] = _mm512_load_si512(t.bits + 8 * i);
}

__attribute__((target("avx512f,fma"))) void silu_mul_avx512(const float* gate, const float* up, int64_t n, float* out) {
  __m512i table[4];
  load_table(table);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 minus_g = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign));
    __m512 e;
    if (!expf_16(minus_g, table, &e)) {
      for (int64_t k = i; k < i + 16; ++k) out[k] = silu_one(gate[k], up[k]);
      continue;
    }
    _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = silu_one(gate[i], up[i]);
}

__attribute__((target("avx512f,fma"))) void expf_avx512(const float* x, int64_t n, float* out) {
  __m512i table[4];
  load_table(table);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e;
    if (expf_16(_mm512_loadu_ps(x + i), table, &e)) {
      _mm512_storeu_ps(out + i, e);
    } else {
      for (int64_t k = i; k < i + 16; ++k) out[k] = std::exp(x[k]);
    }
  }
  for (; i < n; ++i) out[i] = std::exp(x[i]);
}
#endif

}  // namespace

bool silu_mul_simd_available() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

void expf_simd(const float* x, int64_t n, float* out) {
#if defined(__x86_64__) || defined(__i386__)
  if (silu_mul_simd_available()) return expf_avx512(x, n, out);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}

void silu_mul_reference(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu_one(gate[i], up[i]);
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  // Elementwise, so splitting it among threads changes no result; pieces of 4096 keep each
  // thread's share whole vectors.
  constexpr int64_t kPiece = 4096;
  const int64_t pieces = (n + kPiece - 1) / kPiece;
#pragma omp parallel for schedule(static) if (n >= (int64_t{1} << 16))
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t begin = p * kPiece, count = std::min(kPiece, n - begin);
#if defined(__x86_64__) || defined(__i386__)
    if (silu_mul_simd_available()) {
      silu_mul_avx512(gate + begin, up + begin, count, out + begin);
      continue;
    }
#endif
    silu_mul_reference(gate + begin, up + begin, count, out + begin);
  }
}

}  // namespace tq
