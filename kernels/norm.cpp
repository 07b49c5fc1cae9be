#include "kernels/norm.h"

#include <cmath>

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() as an unused merge source, which
// -Wmaybe-uninitialized reports once they are inlined under a target attribute.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tq {
namespace {

constexpr int kPartials = 16;

// The partial sums' fixed tree: [k] + [k + 8], then those eight pairwise.
double add_partials(const double* p) {
  double q[8];
  for (int k = 0; k < 8; ++k) q[k] = p[k] + p[k + 8];
  return ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]));
}

// Squares are exact in double, so a fused multiply-add and a multiply then add give the same sum.
double sum_of_squares_scalar(const float* x, int64_t d) {
  double p[kPartials] = {};
  for (int64_t i = 0; i < d; ++i) p[i % kPartials] += static_cast<double>(x[i]) * x[i];
  return add_partials(p);
}

// double: the mean of squares must not lose the small rows' precision.
float inverse_rms(double sum_sq, int64_t d, float eps) {
  return 1.0f / std::sqrt(static_cast<float>(sum_sq / static_cast<double>(d)) + eps);
}

void scale_row(const float* x, const float* w, int64_t d, double sum_sq, float eps, float* y) {
  const float inv_rms = inverse_rms(sum_sq, d, eps);
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] * inv_rms * w[i];
}

#if defined(__x86_64__) || defined(__i386__)
// scale_row's products, 16 at a time (the same two roundings per element).
__attribute__((target("avx512f"))) void scale_row_avx512(const float* x, const float* w, int64_t d, double sum_sq,
                                                          float eps, float* y) {
  const float inv_rms = inverse_rms(sum_sq, d, eps);
  const __m512 inv = _mm512_set1_ps(inv_rms);
  int64_t i = 0;
  for (; i + 16 <= d; i += 16)
    _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), inv), _mm512_loadu_ps(w + i)));
  for (; i < d; ++i) y[i] = x[i] * inv_rms * w[i];
}

__attribute__((target("avx512f"))) double sum_of_squares_avx512(const float* x, int64_t d) {
  __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();  // partials 0..7 and 8..15
  int64_t i = 0;
  for (; i + kPartials <= d; i += kPartials) {
    const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)), b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    lo = _mm512_add_pd(lo, _mm512_mul_pd(a, a));
    hi = _mm512_add_pd(hi, _mm512_mul_pd(b, b));
  }
  alignas(64) double p[kPartials];
  _mm512_store_pd(p, lo);
  _mm512_store_pd(p + 8, hi);
  for (int64_t k = 0; i + k < d; ++k) p[k] += static_cast<double>(x[i + k]) * x[i + k];
  return add_partials(p);
}

bool avx512_available() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}
#endif

void norm_row(const float* x, const float* w, int64_t d, float eps, float* y) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx512_available()) return scale_row_avx512(x, w, d, sum_of_squares_avx512(x, d), eps, y);
#endif
  scale_row(x, w, d, sum_of_squares_scalar(x, d), eps, y);
}

}  // namespace

void rms_norm(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y) {
  // Rows are independent and each is computed in one order on one thread, so the results do not
  // depend on the threads (a prefill's rows were 4 % of its time on one thread while the other waited).
#pragma omp parallel for schedule(static) if (n * d >= (int64_t{1} << 16))
  for (int64_t t = 0; t < n; ++t) norm_row(x + t * d, w, d, eps, y + t * d);
}

double rms_sum_of_squares(const float* x, int64_t d) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx512_available()) return sum_of_squares_avx512(x, d);
#endif
  return sum_of_squares_scalar(x, d);
}

double rms_sum_of_squares_reference(const float* x, int64_t d) { return sum_of_squares_scalar(x, d); }

void rms_norm_reference(const float* x, const float* w, int64_t n, int64_t d, float eps, float* y) {
  for (int64_t t = 0; t < n; ++t) scale_row(x + t * d, w, d, sum_of_squares_scalar(x + t * d, d), eps, y + t * d);
}

}  // namespace tq
