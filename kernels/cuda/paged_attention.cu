#include "kernels/cuda/paged_attention.h"

#include <cuda_fp16.h>

#include <cfloat>

#include <string>
#include "kernels/cuda/cuda_status.h"

namespace tq::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kDimsPerLane = kMaxHeadDim / kWarp;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ void from_float(float x, float* out) { *out = x; }
__device__ __forceinline__ void from_float(float x, __half* out) { *out = __float2half_rn(x); }

__device__ __forceinline__ int64_t row_offset(const KvPageShape& s, const TokenSlots& slots, int t, int position,
                                              int kv_head) {
  const int32_t block = slots.tables[slots.table_begin[t] + position / s.block_size];
  return ((int64_t(block) * s.n_kv_heads + kv_head) * s.block_size + position % s.block_size) * s.head_dim;
}

// One block per (token, kv head), one thread per element of the row.
template <typename T>
__global__ void store_kv_kernel(KvPageShape s, TokenSlots slots, const float* k, const float* v, T* k_pages,
                                T* v_pages) {
  const int t = blockIdx.x, g = blockIdx.y;
  const int64_t dst = row_offset(s, slots, t, slots.positions[t], g);
  const int64_t src = (int64_t(t) * s.n_kv_heads + g) * s.head_dim;
  for (int i = threadIdx.x; i < s.head_dim; i += blockDim.x) {
    from_float(k[src + i], k_pages + dst + i);
    from_float(v[src + i], v_pages + dst + i);
  }
}

__device__ __forceinline__ float warp_max(float x) {
  for (int m = kWarp / 2; m > 0; m /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int m = kWarp / 2; m > 0; m /= 2) x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}

constexpr int kPartWarps = 4;

// Eight consecutive elements of a row as fp32 (16-byte loads for f16 rows, two for f32).
__device__ __forceinline__ void load8(const __half* p, float out[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float out[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// One block of kPartWarps warps per (token, KV head, part of the context), for the `group` query
// heads of that KV head together, so each K and V row is read once for all of them. Each warp takes
// every kPartWarps-th tile of 32 positions of the part: lane j scores position tile + j against the
// group's queries (held in shared memory), the warp updates each head's running max and sum once
// per tile, then every lane adds the tile's weighted V rows into its own dimensions (lane,
// lane + 32, ...). The warps' states are merged in a fixed order and the part's unnormalized sums
// written for attention_combine_kernel.
template <typename T>
__global__ void __launch_bounds__(kPartWarps * kWarp) attention_part_kernel(
    KvPageShape s, TokenSlots slots, int n_q_heads, const float* q, const T* k_pages, const T* v_pages, float scale,
    int part_rows, int max_parts, float* part_acc, float* part_max, float* part_sum) {
  const int t = blockIdx.x, g = blockIdx.y, part = blockIdx.z;
  const int n_ctx = slots.positions[t] + 1, begin = part * part_rows;
  if (begin >= n_ctx) return;
  const int end = min(n_ctx, begin + part_rows);
  const int group = n_q_heads / s.n_kv_heads, d = s.head_dim;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  extern __shared__ float shared[];
  float* q_s = shared;                       // [group, d]
  float* warp_max_s = q_s + group * d;       // [kPartWarps, group]
  float* warp_sum_s = warp_max_s + kPartWarps * group;  // [kPartWarps, group]
  float* warp_acc_s = warp_sum_s + kPartWarps * group;  // [kPartWarps, group, d]
  const float* q_group = q + (int64_t(t) * n_q_heads + int64_t(g) * group) * d;
  for (int i = threadIdx.x; i < group * d; i += blockDim.x) q_s[i] = q_group[i];
  __syncthreads();

  float run_max[kMaxQueriesPerKvHead], run_sum[kMaxQueriesPerKvHead], acc[kMaxQueriesPerKvHead][kDimsPerLane];
#pragma unroll
  for (int h = 0; h < kMaxQueriesPerKvHead; ++h) {
    run_max[h] = -FLT_MAX;
    run_sum[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[h][i] = 0.0f;
  }
  const bool vector_rows = d % 8 == 0;
  for (int tile = begin + warp * kWarp; tile < end; tile += kPartWarps * kWarp) {
    const int p = tile + lane;
    const bool valid = p < end;
    float dot[kMaxQueriesPerKvHead];
#pragma unroll
    for (int h = 0; h < kMaxQueriesPerKvHead; ++h) dot[h] = 0.0f;
    if (valid) {
      const T* kr = k_pages + row_offset(s, slots, t, p, g);
      if (vector_rows) {
        for (int c = 0; c < d; c += 8) {
          float kv[8];
          load8(kr + c, kv);
#pragma unroll
          for (int h = 0; h < kMaxQueriesPerKvHead; ++h)
            if (h < group)
#pragma unroll
              for (int j = 0; j < 8; ++j) dot[h] = __fmaf_rn(q_s[h * d + c + j], kv[j], dot[h]);
        }
      } else {
        for (int c = 0; c < d; ++c) {
          const float kv = to_float(kr[c]);
#pragma unroll
          for (int h = 0; h < kMaxQueriesPerKvHead; ++h)
            if (h < group) dot[h] = __fmaf_rn(q_s[h * d + c], kv, dot[h]);
        }
      }
    }
    float weight[kMaxQueriesPerKvHead];
#pragma unroll
    for (int h = 0; h < kMaxQueriesPerKvHead; ++h) {
      weight[h] = 0.0f;
      if (h >= group) continue;
      const float score = valid ? __fmul_rn(dot[h], scale) : -FLT_MAX;
      const float new_max = fmaxf(run_max[h], warp_max(score));
      const float correction = expf(run_max[h] - new_max);
      weight[h] = valid ? expf(score - new_max) : 0.0f;
      run_sum[h] = __fadd_rn(__fmul_rn(run_sum[h], correction), warp_sum(weight[h]));
      run_max[h] = new_max;
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) acc[h][i] = __fmul_rn(acc[h][i], correction);
    }
    const int rows = min(kWarp, end - tile);
    for (int j = 0; j < rows; ++j) {
      const T* vr = v_pages + row_offset(s, slots, t, tile + j, g);
      float v[kDimsPerLane];
#pragma unroll
      for (int i = 0; i < kDimsPerLane; ++i) {
        const int dim = lane + i * kWarp;
        v[i] = dim < d ? to_float(vr[dim]) : 0.0f;
      }
#pragma unroll
      for (int h = 0; h < kMaxQueriesPerKvHead; ++h) {
        if (h >= group) continue;
        const float w = __shfl_sync(0xffffffffu, weight[h], j);
#pragma unroll
        for (int i = 0; i < kDimsPerLane; ++i) acc[h][i] = __fmaf_rn(w, v[i], acc[h][i]);
      }
    }
  }
  // The warps' states, merged in warp order.
#pragma unroll
  for (int h = 0; h < kMaxQueriesPerKvHead; ++h) {
    if (h >= group) continue;
    if (lane == 0) {
      warp_max_s[warp * group + h] = run_max[h];
      warp_sum_s[warp * group + h] = run_sum[h];
    }
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int dim = lane + i * kWarp;
      if (dim < d) warp_acc_s[(warp * group + h) * d + dim] = acc[h][i];
    }
  }
  __syncthreads();
  const int64_t slot = (int64_t(t) * max_parts + part) * n_q_heads + int64_t(g) * group;
  for (int item = threadIdx.x; item < group * d; item += blockDim.x) {
    const int h = item / d, dim = item % d;
    float top = -FLT_MAX;
    for (int w = 0; w < kPartWarps; ++w) top = fmaxf(top, warp_max_s[w * group + h]);
    float total = 0.0f, sum = 0.0f;
    for (int w = 0; w < kPartWarps; ++w) {
      const float f = expf(warp_max_s[w * group + h] - top);
      total = __fmaf_rn(warp_sum_s[w * group + h], f, total);
      sum = __fmaf_rn(warp_acc_s[(w * group + h) * d + dim], f, sum);
    }
    part_acc[(slot + h) * d + dim] = sum;
    if (dim == 0) {
      part_max[slot + h] = top;
      part_sum[slot + h] = total;
    }
  }
}

// One warp per (token, query head): the token's parts combined in part order.
__global__ void attention_combine_kernel(TokenSlots slots, int n_q_heads, int d, int part_rows, int max_parts,
                                         const float* part_acc, const float* part_max, const float* part_sum,
                                         float* out) {
  const int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x;
  // ceil((position + 1) / part_rows), never past the slots the launcher sized by max_ctx.
  const int parts = min((slots.positions[t] + part_rows) / part_rows, max_parts);
  const int64_t first = int64_t(t) * max_parts * n_q_heads + h;   // part p's slot: first + p * n_q_heads
  float top = -FLT_MAX;
  for (int p = 0; p < parts; ++p) top = fmaxf(top, part_max[first + int64_t(p) * n_q_heads]);
  float total = 0.0f;
  for (int p = 0; p < parts; ++p) {
    const int64_t slot = first + int64_t(p) * n_q_heads;
    total = __fmaf_rn(part_sum[slot], expf(part_max[slot] - top), total);
  }
  const float inv = 1.0f / total;
  for (int dim = lane; dim < d; dim += kWarp) {
    float sum = 0.0f;
    for (int p = 0; p < parts; ++p) {
      const int64_t slot = first + int64_t(p) * n_q_heads;
      sum = __fmaf_rn(part_acc[slot * d + dim], expf(part_max[slot] - top), sum);
    }
    out[(int64_t(t) * n_q_heads + h) * d + dim] = __fmul_rn(sum, inv);
  }
}

void check_shape(const KvPageShape& s, const std::string& what) {
  if (s.head_dim <= 0 || s.head_dim > kMaxHeadDim)
    fail_with(what + ": head_dim " + std::to_string(s.head_dim) + " (1 to " + std::to_string(kMaxHeadDim) + ")");
  if (s.n_kv_heads <= 0 || s.block_size <= 0)
    fail_with(what + ": " + std::to_string(s.n_kv_heads) + " KV heads, blocks of " + std::to_string(s.block_size));
  if (s.element != Element::F32 && s.element != Element::F16)
    fail_with(what + ": pages of " + element_name(s.element) + " (f32 or f16)");
}

}  // namespace

void store_kv_rows(const KvPageShape& shape, const TokenSlots& slots, const float* k, const float* v, void* k_pages,
                   void* v_pages, cudaStream_t stream) {
  check_shape(shape, "cuda::store_kv_rows");
  if (slots.n == 0) return;
  const dim3 grid(slots.n, shape.n_kv_heads);
  const int threads = shape.head_dim < 128 ? shape.head_dim : 128;
  if (shape.element == Element::F16)
    store_kv_kernel<__half><<<grid, threads, 0, stream>>>(shape, slots, k, v, static_cast<__half*>(k_pages),
                                                          static_cast<__half*>(v_pages));
  else
    store_kv_kernel<float><<<grid, threads, 0, stream>>>(shape, slots, k, v, static_cast<float*>(k_pages),
                                                         static_cast<float*>(v_pages));
  check_launch("store_kv_rows");
}

void paged_attention(const KvPageShape& shape, const TokenSlots& slots, int n_q_heads, int max_ctx, const float* q,
                     const void* k_pages, const void* v_pages, float scale, float* out, AttentionScratch& scratch,
                     cudaStream_t stream, int part_rows) {
  check_shape(shape, "cuda::paged_attention");
  if (n_q_heads <= 0 || n_q_heads % shape.n_kv_heads != 0 || n_q_heads / shape.n_kv_heads > kMaxQueriesPerKvHead)
    fail_with("cuda::paged_attention: " + std::to_string(n_q_heads) + " query heads for " +
              std::to_string(shape.n_kv_heads) + " KV heads (a multiple, at most " +
              std::to_string(kMaxQueriesPerKvHead) + " per KV head)");
  if (part_rows <= 0 || max_ctx <= 0) fail_with("cuda::paged_attention: parts of " + std::to_string(part_rows) +
                                                " rows, context " + std::to_string(max_ctx));
  if (slots.n == 0) return;
  const int max_parts = (max_ctx + part_rows - 1) / part_rows;
  if (max_parts > 65535)  // gridDim.z
    fail_with("cuda::paged_attention: a context of " + std::to_string(max_ctx) + " positions in parts of " +
              std::to_string(part_rows) + " rows is more than 65535 parts");
  const size_t slots_total = size_t(slots.n) * max_parts * n_q_heads;
  scratch.acc.reserve(slots_total * shape.head_dim);
  scratch.max.reserve(slots_total);
  scratch.sum.reserve(slots_total);
  const int group = n_q_heads / shape.n_kv_heads;
  const size_t shared_bytes = sizeof(float) * (size_t(group) * shape.head_dim + 2 * kPartWarps * group +
                                               size_t(kPartWarps) * group * shape.head_dim);
  const dim3 grid(slots.n, shape.n_kv_heads, max_parts);
  if (shape.element == Element::F16)
    attention_part_kernel<__half><<<grid, kPartWarps * kWarp, shared_bytes, stream>>>(
        shape, slots, n_q_heads, q, static_cast<const __half*>(k_pages), static_cast<const __half*>(v_pages), scale,
        part_rows, max_parts, scratch.acc.data(), scratch.max.data(), scratch.sum.data());
  else
    attention_part_kernel<float><<<grid, kPartWarps * kWarp, shared_bytes, stream>>>(
        shape, slots, n_q_heads, q, static_cast<const float*>(k_pages), static_cast<const float*>(v_pages), scale,
        part_rows, max_parts, scratch.acc.data(), scratch.max.data(), scratch.sum.data());
  check_launch("paged_attention (parts)");
  attention_combine_kernel<<<dim3(slots.n, n_q_heads), kWarp, 0, stream>>>(
      slots, n_q_heads, shape.head_dim, part_rows, max_parts, scratch.acc.data(), scratch.max.data(),
      scratch.sum.data(), out);
  check_launch("paged_attention (combine)");
}

}  // namespace tq::cuda
