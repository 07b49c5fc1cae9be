#include "kernels/cuda/paged_attention.h"

#include <cuda_fp16.h>

#include <cfloat>
#include <type_traits>

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

// How a kernel reads one layer's rows: FpRows for the full-precision pages, Tq4Rows for 4-bit
// TurboQuant rows. score() gives the dot products of a K row with the group's queries, value() a
// lane's dimensions (lane, lane + 32, ...) of a V row; rows are addressed by (block, kv head, offset).
template <typename T>
struct FpRows {
  int n_kv_heads, head_dim, block_size;
  const T* k_pages;
  const T* v_pages;

  __device__ __forceinline__ int64_t row(int32_t block, int g, int offset) const {
    return ((int64_t(block) * n_kv_heads + g) * block_size + offset) * head_dim;
  }
  __device__ __forceinline__ void score(int32_t block, int g, int offset, const float* q_s, int group,
                                        float dot[kMaxQueriesPerKvHead]) const {
    const int d = head_dim;
    const T* kr = k_pages + row(block, g, offset);
    if (d % 8 == 0) {
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
  __device__ __forceinline__ void value(int32_t block, int g, int offset, int lane, float v[kDimsPerLane]) const {
    const T* vr = v_pages + row(block, g, offset);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int dim = lane + i * kWarp;
      v[i] = dim < head_dim ? to_float(vr[dim]) : 0.0f;
    }
  }
};

// 4-bit TurboQuant rows as kernels/tq_packing.h lays them out: d/2 bytes of codes (byte c holds
// idx[c] in its low and idx[c + d/2] in its high nibble), then the row's scale, fp32 or fp16. A
// value is scale * levels[idx], one rounding, as the CPU decodes it (kernels/coded_row.h); the
// levels are in shared memory.
struct Tq4Rows {
  int n_kv_heads, head_dim, block_size;
  int row_bytes;  // d/2 + 4, or d/2 + 2 with an fp16 scale
  bool f16_scale;
  const uint8_t* k_pages;
  const uint8_t* v_pages;
  const float* k_levels;  // [16], shared memory
  const float* v_levels;  // [16], shared memory

  __device__ __forceinline__ const uint8_t* row(const uint8_t* pages, int32_t block, int g, int offset) const {
    return pages + ((int64_t(block) * n_kv_heads + g) * block_size + offset) * row_bytes;
  }
  __device__ __forceinline__ float row_scale(const uint8_t* r) const {
    const uint8_t* p = r + head_dim / 2;  // 2-byte aligned (rows are d/2 + 2 or d/2 + 4 bytes, d even)
    if (f16_scale) return __half2float(*reinterpret_cast<const __half*>(p));
    const uint16_t lo = *reinterpret_cast<const uint16_t*>(p), hi = *reinterpret_cast<const uint16_t*>(p + 2);
    return __uint_as_float(uint32_t(lo) | uint32_t(hi) << 16);
  }
  __device__ __forceinline__ void score(int32_t block, int g, int offset, const float* q_s, int group,
                                        float dot[kMaxQueriesPerKvHead]) const {
    const int d = head_dim, half = d / 2;
    const uint8_t* r = row(k_pages, block, g, offset);
    const float sc = row_scale(r);
    for (int c = 0; c < half; c += 2) {  // two code bytes (four values) per 16-bit load
      const uint16_t two = *reinterpret_cast<const uint16_t*>(r + c);
      const float lo0 = __fmul_rn(sc, k_levels[two & 15]), hi0 = __fmul_rn(sc, k_levels[(two >> 4) & 15]);
      const float lo1 = __fmul_rn(sc, k_levels[(two >> 8) & 15]), hi1 = __fmul_rn(sc, k_levels[two >> 12]);
#pragma unroll
      for (int h = 0; h < kMaxQueriesPerKvHead; ++h) {
        if (h >= group) continue;
        const float* qh = q_s + h * d;
        dot[h] = __fmaf_rn(qh[c], lo0, dot[h]);
        dot[h] = __fmaf_rn(qh[c + 1], lo1, dot[h]);
        dot[h] = __fmaf_rn(qh[c + half], hi0, dot[h]);
        dot[h] = __fmaf_rn(qh[c + 1 + half], hi1, dot[h]);
      }
    }
  }
  __device__ __forceinline__ void value(int32_t block, int g, int offset, int lane, float v[kDimsPerLane]) const {
    const int half = head_dim / 2;
    const uint8_t* r = row(v_pages, block, g, offset);
    const float sc = row_scale(r);
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) {
      const int dim = lane + i * kWarp;
      if (dim >= head_dim) {
        v[i] = 0.0f;
        continue;
      }
      const uint8_t byte = r[dim < half ? dim : dim - half];
      v[i] = __fmul_rn(sc, v_levels[dim < half ? byte & 15 : byte >> 4]);
    }
  }
};

// One block of kPartWarps warps per (token, KV head, part of the context), for the `group` query
// heads of that KV head together, so each K and V row is read once for all of them. Each warp takes
// every kPartWarps-th tile of 32 positions of the part: lane j scores position tile + j against the
// group's queries (held in shared memory), the warp updates each head's running max and sum once
// per tile, then every lane adds the tile's weighted V rows into its own dimensions (lane,
// lane + 32, ...). The warps' states are merged in a fixed order and the part's unnormalized sums
// written for attention_combine_kernel. Tq4Rows' levels are copied into shared memory first.
template <typename Rows>
__global__ void __launch_bounds__(kPartWarps * kWarp) attention_part_kernel(
    Rows rows_of, TokenSlots slots, int n_q_heads, const float* q, float scale, int part_rows, int max_parts,
    float* part_acc, float* part_max, float* part_sum) {
  const int t = blockIdx.x, g = blockIdx.y, part = blockIdx.z;
  const int n_ctx = slots.positions[t] + 1, begin = part * part_rows;
  if (begin >= n_ctx) return;
  const int end = min(n_ctx, begin + part_rows);
  const int group = n_q_heads / rows_of.n_kv_heads, d = rows_of.head_dim, bs = rows_of.block_size;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  extern __shared__ float shared[];
  float* q_s = shared;                       // [group, d]
  float* warp_max_s = q_s + group * d;       // [kPartWarps, group]
  float* warp_sum_s = warp_max_s + kPartWarps * group;  // [kPartWarps, group]
  float* warp_acc_s = warp_sum_s + kPartWarps * group;  // [kPartWarps, group, d]
  const float* q_group = q + (int64_t(t) * n_q_heads + int64_t(g) * group) * d;
  for (int i = threadIdx.x; i < group * d; i += blockDim.x) q_s[i] = q_group[i];
  if constexpr (std::is_same_v<Rows, Tq4Rows>) {
    float* levels_s = warp_acc_s + kPartWarps * group * d;  // [2, 16]
    if (threadIdx.x < 32) levels_s[threadIdx.x] = threadIdx.x < 16 ? rows_of.k_levels[threadIdx.x] : rows_of.v_levels[threadIdx.x - 16];
    rows_of.k_levels = levels_s;
    rows_of.v_levels = levels_s + 16;
  }
  __syncthreads();
  const int32_t* table = slots.tables + slots.table_begin[t];

  float run_max[kMaxQueriesPerKvHead], run_sum[kMaxQueriesPerKvHead], acc[kMaxQueriesPerKvHead][kDimsPerLane];
#pragma unroll
  for (int h = 0; h < kMaxQueriesPerKvHead; ++h) {
    run_max[h] = -FLT_MAX;
    run_sum[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < kDimsPerLane; ++i) acc[h][i] = 0.0f;
  }
  for (int tile = begin + warp * kWarp; tile < end; tile += kPartWarps * kWarp) {
    const int p = tile + lane;
    const bool valid = p < end;
    float dot[kMaxQueriesPerKvHead];
#pragma unroll
    for (int h = 0; h < kMaxQueriesPerKvHead; ++h) dot[h] = 0.0f;
    if (valid) rows_of.score(table[p / bs], g, p % bs, q_s, group, dot);
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
      const int pj = tile + j;
      float v[kDimsPerLane];
      rows_of.value(table[pj / bs], g, pj % bs, lane, v);
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

namespace {

// Sizes the scratch, launches the part kernel over `rows` and the combine kernel.
template <typename Rows>
void attend_in_parts(const Rows& rows, const TokenSlots& slots, int n_q_heads, int max_ctx, const float* q,
                     float scale, float* out, AttentionScratch& scratch, cudaStream_t stream, int part_rows,
                     const std::string& what) {
  if (n_q_heads <= 0 || n_q_heads % rows.n_kv_heads != 0 || n_q_heads / rows.n_kv_heads > kMaxQueriesPerKvHead)
    fail_with(what + ": " + std::to_string(n_q_heads) + " query heads for " + std::to_string(rows.n_kv_heads) +
              " KV heads (a multiple, at most " + std::to_string(kMaxQueriesPerKvHead) + " per KV head)");
  if (part_rows <= 0 || max_ctx <= 0)
    fail_with(what + ": parts of " + std::to_string(part_rows) + " rows, context " + std::to_string(max_ctx));
  if (slots.n == 0) return;
  const int max_parts = (max_ctx + part_rows - 1) / part_rows;
  if (max_parts > 65535)  // gridDim.z
    fail_with(what + ": a context of " + std::to_string(max_ctx) + " positions in parts of " +
              std::to_string(part_rows) + " rows is more than 65535 parts");
  const int d = rows.head_dim;
  const size_t slots_total = size_t(slots.n) * max_parts * n_q_heads;
  scratch.acc.reserve(slots_total * d);
  scratch.max.reserve(slots_total);
  scratch.sum.reserve(slots_total);
  const int group = n_q_heads / rows.n_kv_heads;
  const size_t levels_floats = std::is_same_v<Rows, Tq4Rows> ? 32 : 0;  // K's and V's 16 levels
  const size_t shared_floats =
      size_t(group) * d + 2 * kPartWarps * group + size_t(kPartWarps) * group * d + levels_floats;
  const dim3 grid(slots.n, rows.n_kv_heads, max_parts);
  attention_part_kernel<Rows><<<grid, kPartWarps * kWarp, shared_floats * sizeof(float), stream>>>(
      rows, slots, n_q_heads, q, scale, part_rows, max_parts, scratch.acc.data(), scratch.max.data(),
      scratch.sum.data());
  check_launch((what + " (parts)").c_str());
  attention_combine_kernel<<<dim3(slots.n, n_q_heads), kWarp, 0, stream>>>(
      slots, n_q_heads, d, part_rows, max_parts, scratch.acc.data(), scratch.max.data(), scratch.sum.data(), out);
  check_launch((what + " (combine)").c_str());
}

}  // namespace

void paged_attention(const KvPageShape& shape, const TokenSlots& slots, int n_q_heads, int max_ctx, const float* q,
                     const void* k_pages, const void* v_pages, float scale, float* out, AttentionScratch& scratch,
                     cudaStream_t stream, int part_rows) {
  check_shape(shape, "cuda::paged_attention");
  if (shape.element == Element::F16)
    attend_in_parts(FpRows<__half>{shape.n_kv_heads, shape.head_dim, shape.block_size,
                                   static_cast<const __half*>(k_pages), static_cast<const __half*>(v_pages)},
                    slots, n_q_heads, max_ctx, q, scale, out, scratch, stream, part_rows, "cuda::paged_attention");
  else
    attend_in_parts(FpRows<float>{shape.n_kv_heads, shape.head_dim, shape.block_size,
                                  static_cast<const float*>(k_pages), static_cast<const float*>(v_pages)},
                    slots, n_q_heads, max_ctx, q, scale, out, scratch, stream, part_rows, "cuda::paged_attention");
}

void tq4_paged_attention(const Tq4PageShape& shape, const TokenSlots& slots, int n_q_heads, int max_ctx,
                         const float* q_store, const uint8_t* k_pages, const float* k_levels, const uint8_t* v_pages,
                         const float* v_levels, float scale, float* out_store, AttentionScratch& scratch,
                         cudaStream_t stream, int part_rows) {
  const std::string what = "cuda::tq4_paged_attention";
  if (shape.head_dim <= 0 || shape.head_dim > kMaxHeadDim || shape.head_dim % 4 != 0)
    fail_with(what + ": head_dim " + std::to_string(shape.head_dim) + " (a multiple of 4, at most " +
              std::to_string(kMaxHeadDim) + ")");
  if (shape.n_kv_heads <= 0 || shape.block_size <= 0)
    fail_with(what + ": " + std::to_string(shape.n_kv_heads) + " KV heads, blocks of " + std::to_string(shape.block_size));
  if (!k_levels || !v_levels) fail_with(what + ": the K and V codebook levels are needed");
  const Tq4Rows rows{shape.n_kv_heads, shape.head_dim, shape.block_size, tq4_row_bytes(shape), shape.f16_scale,
                     k_pages, v_pages, k_levels, v_levels};
  attend_in_parts(rows, slots, n_q_heads, max_ctx, q_store, scale, out_store, scratch, stream, part_rows, what);
}

int tq4_row_bytes(const Tq4PageShape& shape) { return shape.head_dim / 2 + (shape.f16_scale ? 2 : 4); }

}  // namespace tq::cuda
