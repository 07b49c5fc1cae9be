#include "kernels/cuda/transformer_ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "kernels/cuda/cuda_status.h"

namespace tq::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__device__ float load_element(const void* base, Element e, int64_t i) {
  switch (e) {
    case Element::F32: return static_cast<const float*>(base)[i];
    case Element::F16: return __half2float(static_cast<const __half*>(base)[i]);
    case Element::BF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
  }
  return 0.0f;
}

__global__ void embed_rows_kernel(const void* table, Element e, int64_t cols, const int32_t* ids, float* x) {
  const int t = blockIdx.x;
  const int64_t row = ids[t];
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) x[t * cols + c] = load_element(table, e, row * cols + c);
}

// One block per row: each thread sums its strided elements' squares in double, then a fixed tree
// over the block (the order depends only on d).
__global__ void rms_norm_kernel(const float* x, const float* w, int d, float eps, float* y) {
  __shared__ double partial[kThreads];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * d;
  double sum = 0.0;
  for (int i = threadIdx.x; i < d; i += blockDim.x) sum += double(xr[i]) * double(xr[i]);
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv_rms = 1.0f / sqrtf(static_cast<float>(partial[0] / double(d)) + eps);
  float* yr = y + row * d;
  for (int i = threadIdx.x; i < d; i += blockDim.x) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv_rms), w[i]);
}

// One block per (token, head), one thread per pair.
__global__ void rope_kernel(float* x, int n_heads, int head_dim, const int32_t* positions, const float* inv_freq,
                            bool adjacent) {
  const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x, half = head_dim / 2;
  if (i >= half) return;
  const float angle = __fmul_rn(static_cast<float>(positions[t]), inv_freq[i]);
  const float c = cosf(angle), s = sinf(angle);
  float* v = x + (int64_t(t) * n_heads + h) * head_dim;
  const int ia = adjacent ? 2 * i : i, ib = adjacent ? 2 * i + 1 : i + half;
  const float a = v[ia], b = v[ib];
  v[ia] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  v[ib] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t rows, int64_t cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * cols) y[i] = __fadd_rn(y[i], bias[i % cols]);
}

__global__ void convert_kernel(const float* x, int64_t n, Element e, void* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  switch (e) {
    case Element::F32: static_cast<float*>(out)[i] = x[i]; break;
    case Element::F16: static_cast<__half*>(out)[i] = __float2half_rn(x[i]); break;
    case Element::BF16: static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(x[i]); break;
  }
}

}  // namespace

size_t element_bytes(Element e) { return e == Element::F32 ? 4 : 2; }

const char* element_name(Element e) {
  switch (e) {
    case Element::F32: return "f32";
    case Element::F16: return "f16";
    case Element::BF16: return "bf16";
  }
  return "?";
}

void embed_rows(const void* table, Element e, int64_t cols, const int32_t* ids, int n, float* x, cudaStream_t stream) {
  if (n == 0) return;
  embed_rows_kernel<<<n, kThreads, 0, stream>>>(table, e, cols, ids, x);
  check_launch("embed_rows");
}

void rms_norm(const float* x, const float* w, int64_t rows, int d, float eps, float* y, cudaStream_t stream) {
  if (rows == 0) return;
  if (rows > int64_t{INT32_MAX}) fail_with("cuda::rms_norm: " + std::to_string(rows) + " rows");
  rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, w, d, eps, y);
  check_launch("rms_norm");
}

void rope(float* x, int n, int n_heads, int head_dim, const int32_t* positions, const float* inv_freq,
          RopePairing pairing, cudaStream_t stream) {
  if (n == 0) return;
  if (head_dim % 2 != 0 || head_dim > 2048) fail_with("cuda::rope: head_dim " + std::to_string(head_dim) + " (even, at most 2048)");
  rope_kernel<<<dim3(n, n_heads), head_dim / 2, 0, stream>>>(x, n_heads, head_dim, positions, inv_freq,
                                                              pairing == RopePairing::Adjacent);
  check_launch("rope");
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  silu_mul_kernel<<<blocks_for(n), kThreads, 0, stream>>>(gate, up, n, out);
  check_launch("silu_mul");
}

void add_in_place(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, y, n);
  check_launch("add_in_place");
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows * cols == 0) return;
  add_bias_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(y, bias, rows, cols);
  check_launch("add_bias");
}

void convert_floats(const float* x, int64_t n, Element e, void* out, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, e, out);
  check_launch("convert_floats");
}

}  // namespace tq::cuda
