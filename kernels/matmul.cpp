#include "kernels/matmul.h"

#ifdef TQ_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_HAVE_X86 1
#else
#define TQ_HAVE_X86 0
#endif

namespace tq {
namespace {

// Every output element y[t][o] is the same chain of operations whatever the batch:
//   lane j (0..7) accumulates x[k] * w[k] for k = j, j + 8, ... < in8 with fused multiply-adds,
//   in order; the lanes are summed as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); the
//   tail k in [in8, in) is added in order with fused multiply-adds; then the bias.
// Tiles of several tokens and outputs only change which elements are computed together.
inline float reduce_lanes(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

inline float finish_element(float lanes_sum, const float* x, const float* w, int64_t in8, int64_t in, const float* bias,
                            int64_t o) {
  float s = lanes_sum;
  for (int64_t k = in8; k < in; ++k) s = std::fma(x[k], w[k], s);
  return bias ? s + bias[o] : s;
}

void element_scalar(const float* x, const float* w, int64_t in, const float* bias, int64_t o, float* y) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t in8 = in & ~int64_t{7};
  for (int64_t k = 0; k < in8; k += 8)
    for (int j = 0; j < 8; ++j) lanes[j] = std::fma(x[k + j], w[k + j], lanes[j]);
  *y = finish_element(reduce_lanes(lanes), x, w, in8, in, bias, o);
}

// Tokens per cache block: their rows stay in L2 while every output row streams past.
constexpr int64_t kTokenBlock = 64;

void linear_invariant_scalar(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias,
                             float* y) {
#pragma omp parallel for schedule(static) collapse(2) if (n * out * in > (1 << 16))
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < out; ++o) element_scalar(x + t * in, w + o * in, in, bias, o, y + t * out + o);
}

#if TQ_HAVE_X86

#define TQ_AVX2 __attribute__((target("avx2,fma")))

// MT tokens x NO outputs, one accumulator register per element.
template <int MT, int NO>
TQ_AVX2 inline void tile_avx2(const float* x, int64_t in, const float* w, int64_t o0, int64_t out, const float* bias,
                              float* y) {
  __m256 acc[MT][NO];
#pragma GCC unroll 16
  for (int i = 0; i < MT; ++i)
#pragma GCC unroll 16
    for (int j = 0; j < NO; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t in8 = in & ~int64_t{7};
  const float* wr[NO];
#pragma GCC unroll 16
  for (int j = 0; j < NO; ++j) wr[j] = w + (o0 + j) * in;
  for (int64_t k = 0; k < in8; k += 8) {
    __m256 wv[NO];
#pragma GCC unroll 16
    for (int j = 0; j < NO; ++j) wv[j] = _mm256_loadu_ps(wr[j] + k);
#pragma GCC unroll 16
    for (int i = 0; i < MT; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * in + k);
#pragma GCC unroll 16
      for (int j = 0; j < NO; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
    }
  }
  alignas(32) float lanes[8];
  for (int i = 0; i < MT; ++i)
    for (int j = 0; j < NO; ++j) {
      _mm256_store_ps(lanes, acc[i][j]);
      y[i * out + o0 + j] = finish_element(reduce_lanes(lanes), x + i * in, w + (o0 + j) * in, in8, in, bias, o0 + j);
    }
}

// Tokens [t0, t1) against outputs [o0, o1).
template <int MT>
TQ_AVX2 void rows_avx2(const float* x, int64_t t0, int64_t t1, int64_t in, const float* w, int64_t o0, int64_t o1,
                       int64_t out, const float* bias, float* y) {
  constexpr int NO = MT == 1 ? 8 : 3;
  int64_t o = o0;
  for (; o + NO <= o1; o += NO)
    for (int64_t t = t0; t + MT <= t1; t += MT) tile_avx2<MT, NO>(x + t * in, in, w, o, out, bias, y + t * out);
  for (; o < o1; ++o)
    for (int64_t t = t0; t + MT <= t1; t += MT) tile_avx2<MT, 1>(x + t * in, in, w, o, out, bias, y + t * out);
}

TQ_AVX2 void linear_invariant_avx2(const float* x, int64_t n, int64_t in, const float* w, int64_t out,
                                   const float* bias, float* y) {
  // Work items: (token block, slice of outputs); outputs are split finely enough for two cores
  // even when there is one token.
  const int64_t t_blocks = (n + kTokenBlock - 1) / kTokenBlock;
  const int64_t o_slice = 48;
  const int64_t o_slices = (out + o_slice - 1) / o_slice;
#pragma omp parallel for schedule(static) collapse(2) if (n * out * in > (1 << 16))
  for (int64_t tb = 0; tb < t_blocks; ++tb)
    for (int64_t os = 0; os < o_slices; ++os) {
      const int64_t t0 = tb * kTokenBlock, t1 = std::min(n, t0 + kTokenBlock);
      const int64_t o0 = os * o_slice, o1 = std::min(out, o0 + o_slice);
      const int64_t t4 = t0 + (t1 - t0) / 4 * 4;
      rows_avx2<4>(x, t0, t4, in, w, o0, o1, out, bias, y);
      rows_avx2<1>(x, t4, t1, in, w, o0, o1, out, bias, y);
    }
}

bool cpu_has_avx2_fma() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

#endif

}  // namespace

void linear(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias, float* y) {
#if TQ_HAVE_X86
  if (cpu_has_avx2_fma()) {
    linear_invariant_avx2(x, n, in, w, out, bias, y);
    return;
  }
#endif
  linear_invariant_scalar(x, n, in, w, out, bias, y);
}

void linear_reference_order(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias,
                            float* y) {
  linear_invariant_scalar(x, n, in, w, out, bias, y);
}

#ifdef TQ_HAVE_OPENBLAS
void linear_openblas(const float* x, int64_t n, int64_t in, const float* w, int64_t out, const float* bias, float* y) {
  if (n == 1) {
    // y[out] = W[out, in] · x[in]
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(out), static_cast<int>(in), 1.0f, w,
                static_cast<int>(in), x, 1, 0.0f, y, 1);
  } else {
    // y[n, out] = x[n, in] · W[out, in]ᵀ
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(out),
                static_cast<int>(in), 1.0f, x, static_cast<int>(in), w, static_cast<int>(in), 0.0f, y,
                static_cast<int>(out));
  }
  if (bias) {
    for (int64_t t = 0; t < n; ++t) {
      float* row = y + t * out;
      for (int64_t o = 0; o < out; ++o) row[o] += bias[o];
    }
  }
}
#endif

}  // namespace tq
