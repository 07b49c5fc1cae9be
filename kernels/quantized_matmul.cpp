#include "kernels/quantized_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "errors/error.h"
#include "kernels/dequantize.h"

namespace tq {
namespace {

constexpr int kBlock = 32;

inline float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

inline float round_through_fp16(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// ggml's hsum_float_8: (lanes 0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then the two.
inline float sum_lanes(const float acc[8]) {
  const float r0 = acc[4] + acc[0], r1 = acc[5] + acc[1], r2 = acc[6] + acc[2], r3 = acc[7] + acc[3];
  return (r0 + r2) + (r1 + r3);
}

// Lane k of ggml's mul_sum_*_pairs_float: the exact integer sum of products 4k .. 4k+3.
inline void lane_sums(const int8_t* a, const int8_t* b, float out[8]) {
  for (int k = 0; k < 8; ++k) {
    int32_t s = 0;
    for (int j = 4 * k; j < 4 * k + 4; ++j) s += int32_t{a[j]} * int32_t{b[j]};
    out[k] = static_cast<float>(s);
  }
}

// Unpacks the 32 4-bit values of a Q4 block in element order: low nibbles are values 0..15,
// high nibbles 16..31. `offset` is subtracted (8 for Q4_0, 0 for Q4_1).
inline void unpack_nibbles(const uint8_t* qs, int offset, int8_t out[32]) {
  for (int j = 0; j < 16; ++j) {
    out[j] = static_cast<int8_t>((qs[j] & 0x0F) - offset);
    out[j + 16] = static_cast<int8_t>((qs[j] >> 4) - offset);
  }
}

__attribute__((target_clones("arch=haswell", "default")))
float dot_q8_0(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
  float acc[8] = {0};
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * 34;  // {fp16 d, int8 qs[32]}
    const float d = half(blk) * act[b].d;
    float xy[8];
    lane_sums(reinterpret_cast<const int8_t*>(blk + 2), act[b].qs, xy);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, xy[k], acc[k]);
  }
  return sum_lanes(acc);
}

__attribute__((target_clones("arch=haswell", "default")))
float dot_q4_0(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
  float acc[8] = {0};
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * 18;  // {fp16 d, uint8 qs[16]}
    const float d = half(blk) * act[b].d;
    int8_t q[32];
    unpack_nibbles(blk + 2, 8, q);
    float xy[8];
    lane_sums(q, act[b].qs, xy);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, xy[k], acc[k]);
  }
  return sum_lanes(acc);
}

__attribute__((target_clones("arch=haswell", "default")))
float dot_q4_1(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
  float acc[8] = {0};
  float min_terms = 0;  // Σ m·s: the blocks' offsets times the activation block sums
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * 20;  // {fp16 d, fp16 m, uint8 qs[16]}
    const float d = half(blk) * act[b].d;
    min_terms = std::fma(half(blk + 2), act[b].s, min_terms);
    int8_t q[32];
    unpack_nibbles(blk + 4, 0, q);
    float xy[8];
    lane_sums(q, act[b].qs, xy);
    for (int k = 0; k < 8; ++k) acc[k] = std::fma(d, xy[k], acc[k]);
  }
  return sum_lanes(acc) + min_terms;
}

}  // namespace

bool has_quantized_linear(DType t) { return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1; }

void quantize_activations(const float* x, int64_t n_elems, ActivationBlock* blocks) {
  for (int64_t b = 0; b < n_elems / kBlock; ++b) {
    const float* v = x + b * kBlock;
    float amax = 0;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kBlock; ++j) {
      const int q = static_cast<int>(std::nearbyint(v[j] * id));  // ties to even (default rounding mode)
      blocks[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    blocks[b].d = round_through_fp16(d);
    blocks[b].s = round_through_fp16(d * static_cast<float>(sum));
  }
}

float dot_quantized_row(DType t, const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
  switch (t) {
    case DType::Q8_0: return dot_q8_0(row, act, n_blocks);
    case DType::Q4_0: return dot_q4_0(row, act, n_blocks);
    case DType::Q4_1: return dot_q4_1(row, act, n_blocks);
    default: fail("no quantized linear kernel for weight type {}", dtype_traits(t).name);
  }
}

void linear_quantized(const float* x, int64_t n, int64_t in, DType t, const uint8_t* w, int64_t out, const float* bias,
                      float* y) {
  if (in % kBlock != 0) fail("quantized linear: input width {} is not a multiple of {}", in, kBlock);
  const int64_t n_blocks = in / kBlock;
  const size_t row_bytes = dtype_row_bytes(t, in);
  std::vector<ActivationBlock> act(static_cast<size_t>(n * n_blocks));  // [n, n_blocks]
  for (int64_t r = 0; r < n; ++r) quantize_activations(x + r * in, in, act.data() + r * n_blocks);
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < out; ++o) {
    const uint8_t* row = w + o * row_bytes;
    for (int64_t r = 0; r < n; ++r) {
      const float v = dot_quantized_row(t, row, act.data() + r * n_blocks, n_blocks);
      y[r * out + o] = bias ? v + bias[o] : v;
    }
  }
}

}  // namespace tq
