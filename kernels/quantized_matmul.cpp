#include "kernels/quantized_matmul.h"

#include <immintrin.h>

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

float dot_q8_0_scalar(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
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

float dot_q4_0_scalar(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
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

float dot_q4_1_scalar(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
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

// AVX2 versions: the same lanes, products and FMA order as the scalar code above (and ggml).
__attribute__((target("avx2,fma"))) inline float sum_lanes_avx2(__m256 acc) {
  float lanes[8];
  _mm256_storeu_ps(lanes, acc);
  return sum_lanes(lanes);
}

// Eight int32 lanes, lane k = Σ products 4k..4k+3 of unsigned `ux` and signed `sy` bytes.
__attribute__((target("avx2,fma"))) inline __m256 lane_sums_us8(__m256i ux, __m256i sy) {
  const __m256i pairs = _mm256_maddubs_epi16(ux, sy);  // |products| ≤ 2·127·128: no saturation
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), pairs));
}

__attribute__((target("avx2,fma"))) inline __m256 lane_sums_s8(__m256i x, __m256i y) {
  return lane_sums_us8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

__attribute__((target("avx2,fma"))) inline __m256i nibbles_avx2(const uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_insertf128_si256(_mm256_castsi128_si256(packed), _mm_srli_epi16(packed, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

__attribute__((target("avx2,fma"))) float dot_q8_0_avx2(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * 34;
    const __m256 d = _mm256_set1_ps(half(blk) * act[b].d);
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[b].qs));
    acc = _mm256_fmadd_ps(d, lane_sums_s8(qx, qy), acc);
  }
  return sum_lanes_avx2(acc);
}

__attribute__((target("avx2,fma"))) float dot_q4_0_avx2(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * 18;
    const __m256 d = _mm256_set1_ps(half(blk) * act[b].d);
    const __m256i qx = _mm256_sub_epi8(nibbles_avx2(blk + 2), _mm256_set1_epi8(8));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[b].qs));
    acc = _mm256_fmadd_ps(d, lane_sums_s8(qx, qy), acc);
  }
  return sum_lanes_avx2(acc);
}

__attribute__((target("avx2,fma"))) float dot_q4_1_avx2(const uint8_t* row, const ActivationBlock* act, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float min_terms = 0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = row + b * 20;
    min_terms = std::fma(half(blk + 2), act[b].s, min_terms);
    const __m256 d = _mm256_set1_ps(half(blk) * act[b].d);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act[b].qs));
    acc = _mm256_fmadd_ps(d, lane_sums_us8(nibbles_avx2(blk + 4), qy), acc);
  }
  return sum_lanes_avx2(acc) + min_terms;
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");

}  // namespace

bool has_quantized_linear(DType t) { return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q4_1; }

void quantize_activations(const float* x, int64_t n_elems, ActivationBlock* blocks) {
  for (int64_t b = 0; b < n_elems / kBlock; ++b) {
    const float* v = x + b * kBlock;
    float amax = 0;
    for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
    if (!std::isfinite(amax)) fail("quantized linear: activations are not finite (the model diverged)");
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

float dot_quantized_row(DType t, const uint8_t* row, const ActivationBlock* act, int64_t n_blocks, bool allow_simd) {
  const bool simd = allow_simd && kHaveAvx2;
  switch (t) {
    case DType::Q8_0: return simd ? dot_q8_0_avx2(row, act, n_blocks) : dot_q8_0_scalar(row, act, n_blocks);
    case DType::Q4_0: return simd ? dot_q4_0_avx2(row, act, n_blocks) : dot_q4_0_scalar(row, act, n_blocks);
    case DType::Q4_1: return simd ? dot_q4_1_avx2(row, act, n_blocks) : dot_q4_1_scalar(row, act, n_blocks);
    default: fail("no quantized linear kernel for weight type {}", dtype_traits(t).name);
  }
}

void linear_quantized(const float* x, int64_t n, int64_t in, DType t, const uint8_t* w, int64_t out, const float* bias,
                      float* y) {
  if (in % kBlock != 0) fail("quantized linear: input width {} is not a multiple of {}", in, kBlock);
  // Checked here: a throw inside the parallel loop below would terminate the process.
  if (!has_quantized_linear(t)) fail("no quantized linear kernel for weight type {}", dtype_traits(t).name);
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
