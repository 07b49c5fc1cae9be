#include "kernels/cuda/tq_encode.h"

#include <cuda_fp16.h>

#include <string>

#include "kernels/cuda/cuda_status.h"

namespace tq::cuda {
namespace {

constexpr int kLevels = 16;

// The index of y: how many boundaries are <= y (a branch-free count, as the CPU's).
__device__ __forceinline__ uint8_t level_index(const float* boundaries, float y) {
  int k = 0;
#pragma unroll
  for (int b = 0; b < kLevels - 1; ++b) k += boundaries[b] <= y ? 1 : 0;
  return static_cast<uint8_t>(k);
}

// Σ_j double(y_j) * level(idx_j) and Σ_j level(idx_j)², one element at a time (thread 0).
__device__ void least_squares_sums(const float* y, const uint8_t* idx, const float* levels, int d, double* yc,
                                   double* cc) {
  double a = 0.0, b = 0.0;
  for (int j = 0; j < d; ++j) {
    const double l = levels[idx[j]];
    a = __dadd_rn(a, __dmul_rn(double(y[j]), l));
    b = __dadd_rn(b, __dmul_rn(l, l));
  }
  *yc = a;
  *cc = b;
}

// One block of head_dim threads per (token, KV head). Thread j holds coordinate j; thread 0 does
// the sums that the CPU takes one element at a time.
__global__ void store_tq4_rows_kernel(Tq4PageShape s, Tq4Coding coding, TokenSlots slots, const float* x,
                                      uint8_t* pages, int row_bytes) {
  const int t = blockIdx.x, g = blockIdx.y, j = threadIdx.x, d = s.head_dim;
  __shared__ float x_s[kMaxHeadDim], u_s[kMaxHeadDim], y_s[kMaxHeadDim];
  __shared__ uint8_t idx_s[kMaxHeadDim];
  __shared__ float norm_s, inv_s, inv_alpha_s, scale_s;
  __shared__ double alpha_s;
  __shared__ int stop_s;
  const float* xr = x + (int64_t(t) * s.n_kv_heads + g) * d;
  x_s[j] = coding.center ? __fsub_rn(xr[j], coding.center[g * d + j]) : xr[j];
  __syncthreads();
  if (j == 0) {  // 1. n = ||x||, in double
    double sum = 0.0;
    for (int i = 0; i < d; ++i) sum = __dadd_rn(sum, __dmul_rn(double(x_s[i]), double(x_s[i])));
    const float n = static_cast<float>(sqrt(sum));
    norm_s = n;
    inv_s = n > 0.0f ? __fdiv_rn(1.0f, n) : 0.0f;
  }
  __syncthreads();
  u_s[j] = __fmul_rn(x_s[j], inv_s);  // 2. u = x / n
  __syncthreads();
  {  // y = R u: eight interleaved fp32 partial sums, then a fixed tree (kernels/dense_rotation.cpp)
    const float* row = coding.rotation + size_t(j) * d;
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= d; i += 8)
#pragma unroll
      for (int k = 0; k < 8; ++k) part[k] = __fadd_rn(part[k], __fmul_rn(row[i + k], u_s[i + k]));
    for (; i < d; ++i) part[i & 7] = __fadd_rn(part[i & 7], __fmul_rn(row[i], u_s[i]));
    y_s[j] = __fadd_rn(__fadd_rn(__fadd_rn(part[0], part[4]), __fadd_rn(part[1], part[5])),
                       __fadd_rn(__fadd_rn(part[2], part[6]), __fadd_rn(part[3], part[7])));
  }
  __syncthreads();
  idx_s[j] = level_index(coding.boundaries, y_s[j]);  // 3. the nearest level
  __syncthreads();
  const float n = norm_s;
  if (j == 0) {  // 4. the scale
    float scale = n;
    if (coding.rule == Tq4ScaleRule::NormCorrected && n > 0.0f) {
      double yhat2 = 0.0;
      for (int i = 0; i < d; ++i) {
        const double l = coding.levels[idx_s[i]];
        yhat2 = __dadd_rn(yhat2, __dmul_rn(l, l));
      }
      scale = static_cast<float>(__ddiv_rn(double(n), sqrt(yhat2)));
    }
    scale_s = scale;
    alpha_s = 1.0;
    stop_s = !(coding.rule == Tq4ScaleRule::LeastSquares && n > 0.0f);
  }
  __syncthreads();
  // Least squares: alternate the best scale for the indices and the best indices for the scale.
  for (int round = 0; round < 3; ++round) {
    if (j == 0 && !stop_s) {
      double yc, cc;
      least_squares_sums(y_s, idx_s, coding.levels, d, &yc, &cc);
      if (!(yc > 0.0)) {
        stop_s = 1;
      } else {
        alpha_s = __ddiv_rn(yc, cc);
        inv_alpha_s = static_cast<float>(__ddiv_rn(1.0, alpha_s));
      }
    }
    __syncthreads();
    if (stop_s) break;  // the same for every thread: read after the barrier
    idx_s[j] = level_index(coding.boundaries, __fmul_rn(y_s[j], inv_alpha_s));
    __syncthreads();
  }
  if (j == 0 && coding.rule == Tq4ScaleRule::LeastSquares && n > 0.0f) {
    double yc, cc, alpha = alpha_s;
    least_squares_sums(y_s, idx_s, coding.levels, d, &yc, &cc);
    if (yc > 0.0) alpha = __ddiv_rn(yc, cc);
    scale_s = static_cast<float>(__dmul_rn(double(n), alpha));
  }
  __syncthreads();
  // 5. Store: byte c = idx[c] | idx[c + d/2] << 4, then the scale (fp16 saturating, as the CPU's).
  const int32_t block = slots.tables[slots.table_begin[t] + slots.positions[t] / s.block_size];
  uint8_t* row = pages + ((int64_t(block) * s.n_kv_heads + g) * s.block_size + slots.positions[t] % s.block_size) * row_bytes;
  if (j < d / 2) row[j] = static_cast<uint8_t>(idx_s[j] | idx_s[j + d / 2] << 4);
  if (j == 0) {
    const float scale = scale_s;
    if (s.f16_scale) {
      const __half h = __float2half_rn(isfinite(scale) ? fminf(scale, 65504.0f) : scale);
      *reinterpret_cast<__half*>(row + d / 2) = h;
    } else {
      const uint32_t bits = __float_as_uint(scale);  // the row may be only 2-byte aligned
      reinterpret_cast<uint16_t*>(row + d / 2)[0] = static_cast<uint16_t>(bits);
      reinterpret_cast<uint16_t*>(row + d / 2)[1] = static_cast<uint16_t>(bits >> 16);
    }
  }
}

}  // namespace

void store_tq4_rows(const Tq4PageShape& shape, const Tq4Coding& coding, const TokenSlots& slots, const float* x,
                    uint8_t* pages, cudaStream_t stream) {
  const std::string what = "cuda::store_tq4_rows";
  if (shape.head_dim <= 0 || shape.head_dim > kMaxHeadDim || shape.head_dim % 4 != 0)
    fail_with(what + ": head_dim " + std::to_string(shape.head_dim) + " (a multiple of 4, at most " +
              std::to_string(kMaxHeadDim) + ")");
  if (!coding.rotation || !coding.boundaries || !coding.levels)
    fail_with(what + ": the rotation, boundaries and levels are needed");
  if (slots.n == 0) return;
  store_tq4_rows_kernel<<<dim3(slots.n, shape.n_kv_heads), shape.head_dim, 0, stream>>>(shape, coding, slots, x, pages,
                                                                                         tq4_row_bytes(shape));
  check_launch(what.c_str());
}

}  // namespace tq::cuda
