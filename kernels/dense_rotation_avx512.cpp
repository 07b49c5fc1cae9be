// AVX-512 dense rotations (kernels/dense_rotation.h). Products and sums are separate
// instructions (this file is compiled with -ffp-contract=off, and the target has no FMA), so
// each lane rounds exactly as the scalar loop does.
#include "kernels/dense_rotation.h"

#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace tq {
namespace {

#define TQ_AVX512 __attribute__((target("avx512f")))

constexpr int kMaxDim = 512;

// Rows [r0, r0 + 16 * B) of y = R x: for each lane (a row), the eight partial sums of the scalar
// loop in eight registers, products in the order j = 0, 1, ..., so partial k sees j = k, k + 8, ...
template <int B>
TQ_AVX512 void rotate_rows(const float* rt, const float* x, float* y, int n, int r0) {
  __m512 acc[B][8];
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b)
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) acc[b][k] = _mm512_setzero_ps();
  for (int j0 = 0; j0 < n; j0 += 8) {
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const int j = j0 + k;
      const __m512 xj = _mm512_set1_ps(x[j]);
      const float* col = rt + size_t(j) * n + r0;
#pragma GCC unroll 16
      for (int b = 0; b < B; ++b)
        acc[b][k] = _mm512_add_ps(acc[b][k], _mm512_mul_ps(_mm512_loadu_ps(col + 16 * b), xj));
    }
  }
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) {
    const __m512 lo = _mm512_add_ps(_mm512_add_ps(acc[b][0], acc[b][4]), _mm512_add_ps(acc[b][1], acc[b][5]));
    const __m512 hi = _mm512_add_ps(_mm512_add_ps(acc[b][2], acc[b][6]), _mm512_add_ps(acc[b][3], acc[b][7]));
    _mm512_storeu_ps(y + r0 + 16 * b, _mm512_add_ps(lo, hi));
  }
}

// Columns [c0, c0 + 16 * B) of x = R^T y: each lane (a column) sums y_i R[i][j] over i in order.
template <int B>
TQ_AVX512 void rotate_columns(const float* r, const float* y, float* x, int n, int c0) {
  __m512 acc[B];
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) acc[b] = _mm512_setzero_ps();
  for (int i = 0; i < n; ++i) {
    const __m512 yi = _mm512_set1_ps(y[i]);
    const float* row = r + size_t(i) * n + c0;
#pragma GCC unroll 16
    for (int b = 0; b < B; ++b) acc[b] = _mm512_add_ps(acc[b], _mm512_mul_ps(yi, _mm512_loadu_ps(row + 16 * b)));
  }
#pragma GCC unroll 16
  for (int b = 0; b < B; ++b) _mm512_storeu_ps(x + c0 + 16 * b, acc[b]);
}

}  // namespace

bool dense_rotation_avx512_available(int dim) {
  static const bool cpu = __builtin_cpu_supports("avx512f");
  return cpu && dim > 0 && dim % 16 == 0 && dim <= kMaxDim;
}

void rotate_dense_avx512(const float* r_transposed, const float* x, float* y, int dim) {
  alignas(64) float in[kMaxDim];  // x may be y, which the first row blocks overwrite
  std::memcpy(in, x, sizeof(float) * dim);
  int r0 = 0;
  for (; r0 + 32 <= dim; r0 += 32) rotate_rows<2>(r_transposed, in, y, dim, r0);
  if (r0 < dim) rotate_rows<1>(r_transposed, in, y, dim, r0);
}

void rotate_dense_transpose_avx512(const float* r, const float* y, float* x, int dim) {
  alignas(64) float in[kMaxDim];
  std::memcpy(in, y, sizeof(float) * dim);
  int c0 = 0;
  for (; c0 + 128 <= dim; c0 += 128) rotate_columns<8>(r, in, x, dim, c0);
  for (; c0 + 64 <= dim; c0 += 64) rotate_columns<4>(r, in, x, dim, c0);
  for (; c0 < dim; c0 += 16) rotate_columns<1>(r, in, x, dim, c0);
}

}  // namespace tq

#else

namespace tq {

bool dense_rotation_avx512_available(int) { return false; }
void rotate_dense_avx512(const float*, const float*, float*, int) {}
void rotate_dense_transpose_avx512(const float*, const float*, float*, int) {}

}  // namespace tq

#endif
