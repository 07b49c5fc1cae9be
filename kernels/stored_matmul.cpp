#include "kernels/stored_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/interleaved_rows.h"
#include "kernels/stored_matmul_avx2.h"
#include "kernels/stored_matmul_amx.h"
#include "kernels/stored_matmul_avx512.h"
#include "kernels/weight_slices.h"

namespace tq {
namespace {

constexpr int kSlice = 32;

inline float round_through_fp16(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// ggml's hsum_float_8: (lanes 0+4, 1+5, 2+6, 3+7), then (0+2, 1+3), then the two.
inline float sum_lanes(const float acc[8]) {
  const float r0 = acc[4] + acc[0], r1 = acc[5] + acc[1], r2 = acc[6] + acc[2], r3 = acc[7] + acc[3];
  return (r0 + r2) + (r1 + r3);
}

bool has_offset(DType t) { return t == DType::Q4_1 || t == DType::Q4_K || t == DType::Q5_K; }

bool is_k_quant(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

// One output element of a block format: Σ over slices of scale·(exact lane sums), in eight
// lanes, plus the offsets times the activation block sums.
float dot_slices_reference(DType t, const uint8_t* row, const ActivationBlock* act, int64_t n_slices) {
  float acc[8] = {0};
  float offsets = 0;
  WeightSlice s;
  for (int64_t b = 0; b < n_slices; ++b) {
    unpack_weight_slice(t, row, b, &s);
    for (int k = 0; k < 8; ++k) {
      int32_t sum = 0;  // lane k: values 4k .. 4k+3
      for (int j = 4 * k; j < 4 * k + 4; ++j) sum += int32_t{s.q[j]} * int32_t{act[b].qs[j]};
      acc[k] = std::fma(s.scale[k] * act[b].d, static_cast<float>(sum), acc[k]);
    }
    if (has_offset(t)) offsets = std::fma(s.offset, act[b].s, offsets);
  }
  return has_offset(t) ? sum_lanes(acc) + offsets : sum_lanes(acc);
}

// One output element of a K-quant format: per slice the exact integer sum of each run of values
// that shares a scale (all 32 for Q4_K and Q5_K, each 16 for Q6_K) times scale·d_act, in one
// fp32 FMA chain, plus the offsets times the activation block sums.
float dot_k_slices_reference(DType t, const uint8_t* row, const ActivationBlock* act, int64_t n_slices) {
  float acc = 0, offsets = 0;
  WeightSlice s;
  for (int64_t b = 0; b < n_slices; ++b) {
    unpack_weight_slice(t, row, b, &s);
    int32_t half[2] = {0, 0};  // values 0..15, 16..31
    for (int j = 0; j < 32; ++j) half[j / 16] += int32_t{s.q[j]} * int32_t{act[b].qs[j]};
    if (t == DType::Q6_K) {
      acc = std::fma(s.scale[0] * act[b].d, static_cast<float>(half[0]), acc);
      acc = std::fma(s.scale[4] * act[b].d, static_cast<float>(half[1]), acc);
    } else {
      acc = std::fma(s.scale[0] * act[b].d, static_cast<float>(half[0] + half[1]), acc);
    }
    if (has_offset(t)) offsets = std::fma(s.offset, act[b].s, offsets);
  }
  return has_offset(t) ? acc + offsets : acc;
}

float widen(DType t, const uint8_t* row, int64_t k) {
  uint16_t h;
  std::memcpy(&h, row + 2 * k, 2);
  return t == DType::F16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// One output element of an F16/BF16 row: eight FMA lanes over k (lane k % 8), the lane sum,
// then the tail past the last multiple of 8 in order.
float dot_half_reference(DType t, const uint8_t* row, const float* x, int64_t in) {
  float acc[8] = {0};
  const int64_t body = in - in % 8;
  for (int64_t k = 0; k < body; ++k) acc[k % 8] = std::fma(widen(t, row, k), x[k], acc[k % 8]);
  float total = sum_lanes(acc);
  for (int64_t k = body; k < in; ++k) total = std::fma(widen(t, row, k), x[k], total);
  return total;
}

const bool kHaveAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                       __builtin_cpu_supports("f16c");

bool is_half(DType t) { return t == DType::F16 || t == DType::BF16; }

bool activations_are_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

void check_shapes(int64_t in, DType t) {
  // Checked before any parallel loop: a throw inside one would terminate the process.
  if (!has_stored_linear(t)) fail("no stored-weight linear kernel for weight type {}", dtype_traits(t).name);
  const int block = dtype_traits(t).block_elems;
  if (in % std::max(block, kSlice) != 0 && !is_half(t))
    fail("stored linear: input width {} is not a multiple of {}'s block of {}", in, dtype_traits(t).name, block);
}

// x: [n, in] → [n, in / 32] blocks, with the AVX2 quantizer (bit-identical) when `simd`.
std::vector<ActivationBlock> quantize_rows(const float* x, int64_t n, int64_t in, bool simd) {
  const int64_t n_slices = in / kSlice;
  std::vector<ActivationBlock> act(static_cast<size_t>(n * n_slices));  // [n, n_slices]
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (n >= 16)
  for (int64_t r = 0; r < n; ++r) {
    if (simd) {
      finite = quantize_activations_avx2(x + r * in, in, act.data() + r * n_slices) && finite;
    } else {
      finite = activations_are_finite(x + r * in, in) && finite;
      if (finite) quantize_activations(x + r * in, in, act.data() + r * n_slices);
    }
  }
  if (!finite) fail("stored linear: activations are not finite (the model diverged)");
  return act;
}

}  // namespace

bool has_stored_linear(DType t) { return is_half(t) || has_weight_slices(t); }

void quantize_activations(const float* x, int64_t n_elems, ActivationBlock* blocks) {
  for (int64_t b = 0; b < n_elems / kSlice; ++b) {
    const float* v = x + b * kSlice;
    if (!activations_are_finite(v, kSlice)) fail("stored linear: activations are not finite (the model diverged)");
    float amax = 0;
    for (int j = 0; j < kSlice; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < kSlice; ++j) {
      const int q = static_cast<int>(std::nearbyint(v[j] * id));  // ties to even (default rounding mode)
      blocks[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    blocks[b].d = round_through_fp16(d);
    blocks[b].s = round_through_fp16(d * static_cast<float>(sum));
  }
}

void linear_stored_reference(const float* x, int64_t n, int64_t in, DType t, const uint8_t* w, int64_t out,
                             const float* bias, float* y) {
  check_shapes(in, t);
  const size_t row_bytes = dtype_row_bytes(t, in);
  std::vector<ActivationBlock> act;
  if (!is_half(t)) act = quantize_rows(x, n, in, false);
  const int64_t n_slices = in / kSlice;
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < out; ++o) {
    const uint8_t* row = w + o * row_bytes;
    for (int64_t r = 0; r < n; ++r) {
      const float v = is_half(t) ? dot_half_reference(t, row, x + r * in, in)
                      : is_k_quant(t) ? dot_k_slices_reference(t, row, act.data() + r * n_slices, n_slices)
                                      : dot_slices_reference(t, row, act.data() + r * n_slices, n_slices);
      y[r * out + o] = bias ? v + bias[o] : v;
    }
  }
}

void linear_stored(const float* x, int64_t n, int64_t in, DType t, const uint8_t* w, int64_t out, const float* bias,
                   float* y) {
  const StoredProduct product{t, w, out, bias, y};
  linear_stored_many(x, n, in, &product, 1);
}

std::string stored_weight_kernels() {
  std::string s = stored_matmul_avx512_available() ? "AVX-512 VNNI, rows interleaved 16 at a time"
                  : kHaveAvx2                       ? "AVX2, Q4_1 rows interleaved 8 at a time"
                                                    : "scalar";
  if (stored_matmul_amx_available()) s += "; AMX tiles for Q4_K and Q6_K at 16+ tokens";
  return s;
}

void linear_stored_many(const float* x, int64_t n, int64_t in, const StoredProduct* products, int count) {
  if (!kHaveAvx2) {
    for (int i = 0; i < count; ++i) {
      const StoredProduct& p = products[i];
      if (p.group_rows > 0) fail("stored linear: interleaved weights need their SIMD kernel (interleaved_kernel_available)");
      linear_stored_reference(x, n, in, p.type, p.w, p.out, p.bias, p.y);
    }
    return;
  }
  bool any_blocks = false;
  std::vector<int64_t> first_panel(static_cast<size_t>(count) + 1, 0);  // [count + 1]
  for (int i = 0; i < count; ++i) {
    check_shapes(in, products[i].type);
    if (products[i].group_rows > 0 &&
        !interleaved_kernel_available(products[i].type, products[i].group_rows))
      fail("stored linear: no kernel for {} rows interleaved {} at a time on this CPU",
           dtype_traits(products[i].type).name, products[i].group_rows);
    any_blocks = any_blocks || !is_half(products[i].type);
    first_panel[i + 1] = first_panel[i] + (products[i].out + kStoredPanelRows - 1) / kStoredPanelRows;
  }
  std::vector<ActivationBlock> act;
  if (any_blocks) act = quantize_rows(x, n, in, true);  // once for every product
  const int64_t n_slices = in / kSlice;
  std::vector<int32_t> act_sums;  // [n, n_slices, 8] for Q8_0 and Q6_K interleaved rows (their VNNI kernels)
  for (int i = 0; i < count && act_sums.empty(); ++i)
    if ((products[i].type == DType::Q8_0 || products[i].type == DType::Q6_K) && products[i].group_rows == 16) {
      act_sums.resize(act.size() * 8);
      activation_group_sums(act.data(), static_cast<int64_t>(act.size()), act_sums.data());
    }
  // Whole blocks of 16 tokens go through AMX tiles where the CPU has them (Q4_K, Q6_K), the rest
  // through VNNI: the same results either way.
  int64_t amx_tokens = 0;
  std::unique_ptr<AmxActivationSlice[]> amx_act;  // [amx_tokens / 16, n_slices], every element written by the packing
  for (int i = 0; i < count && amx_tokens == 0; ++i)
    if ((products[i].type == DType::Q4_K || products[i].type == DType::Q6_K) && products[i].group_rows == 16 &&
        n >= kAmxTokens && stored_matmul_amx_available()) {
      amx_tokens = n / kAmxTokens * kAmxTokens;
      amx_act.reset(new AmxActivationSlice[static_cast<size_t>(amx_tokens / kAmxTokens * n_slices)]);
      pack_activations_for_amx(act.data(), amx_tokens, n_slices, amx_act.get());
    }
  // Panels [p_begin, p_end) of product i on the calling thread.
  const auto run_panels = [&](int i, int64_t p_begin, int64_t p_end) {
    const StoredProduct& p = products[i];
    const size_t row_bytes = dtype_row_bytes(p.type, in);
    if (p.group_rows > 0) {
      const int64_t groups_per_panel = kStoredPanelRows / p.group_rows;
      const int64_t n_groups = (p.out + p.group_rows - 1) / p.group_rows;
      const int64_t g_begin = p_begin * groups_per_panel, g_end = std::min(n_groups, p_end * groups_per_panel);
      if (p.group_rows == 16) {
        const int64_t tiled = p.type == DType::Q4_K || p.type == DType::Q6_K ? amx_tokens : 0;
        const int32_t* tail_sums = act_sums.empty() ? nullptr : act_sums.data() + tiled * n_slices * 8;
        if (tiled > 0)
          linear_interleaved16_amx_groups(p.type, amx_act.get(), tiled, act.data() + tiled * n_slices, tail_sums,
                                          n - tiled, n_slices, p.w, p.out, p.bias, p.y, g_begin, g_end);
        else
          linear_interleaved16_avx512_groups(p.type, act.data(), act_sums.empty() ? nullptr : act_sums.data(), n,
                                             n_slices, p.w, p.out, p.bias, p.y, g_begin, g_end);
      } else {
        linear_interleaved_avx2_groups(p.type, act.data(), n, n_slices, p.w, p.out, p.bias, p.y, g_begin, g_end);
      }
    } else if (is_half(p.type)) {
      linear_half_avx2_panels(p.type, x, n, in, p.w, row_bytes, p.out, p.bias, p.y, p_begin, p_end);
    } else {
      linear_slices_avx2_panels(p.type, act.data(), n, n_slices, p.w, row_bytes, p.out, p.bias, p.y, p_begin, p_end);
    }
  };
  // One parallel region over every product's panels (one fork and one join for all of them), each
  // thread taking one contiguous range of at most ceil(panels / threads) and handing each product's
  // part of it to the kernel in one call: the AMX kernel then walks a chunk of tokens through all
  // its groups before the next chunk. Which thread computes a panel changes no result.
  const int64_t n_panels = first_panel[count];
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), per_thread = (n_panels + threads - 1) / threads;
    int64_t begin = std::min(n_panels, omp_get_thread_num() * per_thread);
    const int64_t end = std::min(n_panels, begin + per_thread);
    for (int i = 0; begin < end; begin = std::min(end, first_panel[i + 1])) {
      while (begin >= first_panel[i + 1]) ++i;
      run_panels(i, begin - first_panel[i], std::min(end, first_panel[i + 1]) - first_panel[i]);
    }
  }
}

}  // namespace tq
