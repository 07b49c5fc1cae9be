#include "kernels/stored_matmul.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "errors/error.h"
#include "kernels/dequantize.h"
#include "kernels/interleaved_rows.h"
#include "kernels/stored_matmul_avx2.h"
#include "kernels/stored_matmul_amx.h"
#include "kernels/stored_matmul_avx512.h"
#include "kernels/weight_slices.h"
#include "memory/huge_pages.h"

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

// One output element of a K-quant format: per 256-value super-block the exact int32 sums
// isum = Σ_r scale_r · Σ_{i in run r} q_i·a_i and msum = Σ_j min_j · (the activation sum of slice j),
// then acc = fma(d·d_act, isum, acc) and, with minima, acc = fma(-(dmin·d_act), msum, acc).
float dot_k_superblocks_reference(DType t, const uint8_t* row, const SuperblockActivation* act, int64_t n_super) {
  float acc = 0;
  KQuantSuperblock w;
  for (int64_t b = 0; b < n_super; ++b) {
    unpack_k_quant_superblock(t, row, b, &w);
    const SuperblockActivation& a = act[b];
    int32_t isum = 0, msum = 0;
    for (int r = 0; r < 16; ++r) {
      int32_t run = 0;
      for (int i = 16 * r; i < 16 * r + 16; ++i) run += int32_t{w.q[i]} * int32_t{a.qs[i]};
      isum += int32_t{w.scale[r]} * run;
    }
    for (int j = 0; j < 8; ++j) msum += int32_t{w.min[j]} * (int32_t{a.sums[2 * j]} + int32_t{a.sums[2 * j + 1]});
    acc = std::fma(w.d * a.d, static_cast<float>(isum), acc);
    if (t != DType::Q6_K) acc = std::fma(-(w.dmin * a.d), static_cast<float>(msum), acc);
  }
  return acc;
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

// A buffer each thread keeps between calls, grown and never shrunk or cleared: a serving step's
// quantized activations are several MB, and fresh ones for every product were mapped and zeroed by
// the kernel each time (2 % of a serving profile in page faults and clear_page). 64-byte aligned;
// from 2 MiB on in huge pages.
template <class T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { release(); }
  T* get(size_t n) {
    if (n > capacity_) {
      n = std::max(n, capacity_ + capacity_ / 2);  // a batch growing token by token reallocates rarely
      release();
      const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
      huge_ = large_buffers_mapped() && bytes >= kHugePageBytes;
      data_ = static_cast<T*>(huge_ ? huge_page_allocate(bytes) : std::aligned_alloc(64, bytes));
      if (!data_) throw std::bad_alloc();
      capacity_ = n;
    }
    return data_;
  }

 private:
  void release() {
    if (huge_)
      huge_page_free(data_, (capacity_ * sizeof(T) + 63) / 64 * 64);
    else
      std::free(data_);
    data_ = nullptr;
    capacity_ = 0;
  }
  T* data_ = nullptr;
  size_t capacity_ = 0;
  bool huge_ = false;
};

// x: [n, in] → act: [n, in / 32] blocks (Block = ActivationBlock) or [n, in / 256] super-blocks (Block =
// SuperblockActivation), with the AVX-512 or AVX2 quantizer (bit-identical) when `simd`.
template <class Block>
void quantize_rows(const float* x, int64_t n, int64_t in, bool simd, Block* act) {
  constexpr bool kSuper = std::is_same_v<Block, SuperblockActivation>;
  const int64_t per_row = in / (kSuper ? 256 : kSlice);
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (n >= 16)
  for (int64_t r = 0; r < n; ++r) {
    Block* out = act + r * per_row;
    if (simd) {
      if constexpr (kSuper)
        finite = (stored_matmul_avx512_available() ? quantize_superblock_activations_avx512(x + r * in, in, out)
                                                   : quantize_superblock_activations_avx2(x + r * in, in, out)) &&
                 finite;
      else
        finite = quantize_activations_avx2(x + r * in, in, out) && finite;
    } else {
      finite = activations_are_finite(x + r * in, in) && finite;
      if (finite) {
        if constexpr (kSuper)
          quantize_superblock_activations(x + r * in, in, out);
        else
          quantize_activations(x + r * in, in, out);
      }
    }
  }
  if (!finite) fail("stored linear: activations are not finite (the model diverged)");
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
    const float id = 127.0f / amax <= 3.40282347e38f ? 127.0f / amax : 0.0f;  // 0 (an all-zero block) for amax < 3.7e-37
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

void quantize_superblock_activations(const float* x, int64_t n_elems, SuperblockActivation* blocks) {
  for (int64_t b = 0; b < n_elems / 256; ++b) {
    const float* v = x + b * 256;
    if (!activations_are_finite(v, 256)) fail("stored linear: activations are not finite (the model diverged)");
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float id = 127.0f / amax <= 3.40282347e38f ? 127.0f / amax : 0.0f;  // 0 (an all-zero block) for amax < 3.7e-37
    for (int r = 0; r < 16; ++r) {
      int32_t sum = 0;
      for (int j = 16 * r; j < 16 * r + 16; ++j) {
        const int q = static_cast<int>(std::nearbyint(v[j] * id));  // ties to even (default rounding mode)
        blocks[b].qs[j] = static_cast<int8_t>(q);
        sum += q;
      }
      blocks[b].sums[r] = static_cast<int16_t>(sum);
    }
    blocks[b].d = amax / 127.0f;
  }
}

void linear_stored_reference(const float* x, int64_t n, int64_t in, DType t, const uint8_t* w, int64_t out,
                             const float* bias, float* y) {
  check_shapes(in, t);
  const size_t row_bytes = dtype_row_bytes(t, in);
  const int64_t n_slices = in / kSlice, n_super = in / 256;
  std::vector<ActivationBlock> act(is_k_quant(t) || is_half(t) ? 0 : n * n_slices);
  std::vector<SuperblockActivation> k_act(is_k_quant(t) ? n * n_super : 0);
  if (!act.empty()) quantize_rows<ActivationBlock>(x, n, in, false, act.data());
  if (!k_act.empty()) quantize_rows<SuperblockActivation>(x, n, in, false, k_act.data());
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < out; ++o) {
    const uint8_t* row = w + o * row_bytes;
    for (int64_t r = 0; r < n; ++r) {
      const float v = is_half(t) ? dot_half_reference(t, row, x + r * in, in)
                      : is_k_quant(t) ? dot_k_superblocks_reference(t, row, k_act.data() + r * n_super, n_super)
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
  bool any_blocks = false, any_k_quants = false;
  std::vector<int64_t> first_panel(static_cast<size_t>(count) + 1, 0);  // [count + 1]
  for (int i = 0; i < count; ++i) {
    const DType t = products[i].type;
    check_shapes(in, t);
    if (products[i].group_rows > 0 && !interleaved_kernel_available(t, products[i].group_rows))
      fail("stored linear: no kernel for {} rows interleaved {} at a time on this CPU", dtype_traits(t).name,
           products[i].group_rows);
    any_k_quants = any_k_quants || is_k_quant(t);
    any_blocks = any_blocks || (!is_half(t) && !is_k_quant(t));
    first_panel[i + 1] = first_panel[i] + (products[i].out + kStoredPanelRows - 1) / kStoredPanelRows;
  }
  // The activations quantized once for every product: in blocks of 32 (Q8_0, Q4_0, Q4_1) and in
  // super-blocks of 256 (the K-quants).
  const int64_t n_slices = in / kSlice, n_super = in / 256;
  thread_local Scratch<ActivationBlock> act_scratch;
  thread_local Scratch<SuperblockActivation> k_act_scratch;
  thread_local Scratch<int32_t> act_sums_scratch;
  thread_local Scratch<AmxActivationSuperblock> amx_scratch;
  ActivationBlock* const act = any_blocks ? act_scratch.get(n * n_slices) : nullptr;  // [n, n_slices]
  if (any_blocks) quantize_rows<ActivationBlock>(x, n, in, true, act);
  SuperblockActivation* const k_act = any_k_quants ? k_act_scratch.get(n * n_super) : nullptr;  // [n, n_super]
  if (any_k_quants) quantize_rows<SuperblockActivation>(x, n, in, true, k_act);
  int32_t* act_sums = nullptr;  // [n, n_slices, 8] for Q8_0 interleaved rows (its VNNI kernel)
  for (int i = 0; i < count && !act_sums; ++i)
    if (products[i].type == DType::Q8_0 && products[i].group_rows == 16) {
      act_sums = act_sums_scratch.get(n * n_slices * 8);
      activation_group_sums(act, n * n_slices, act_sums);
    }
  // Whole blocks of 16 tokens go through AMX tiles where the CPU has them (Q4_K, Q6_K), the rest
  // through VNNI: the same results either way.
  int64_t amx_tokens = 0;
  AmxActivationSuperblock* amx_act = nullptr;  // [amx_tokens / 16, n_super], all written by the packing
  for (int i = 0; i < count && amx_tokens == 0; ++i)
    if ((products[i].type == DType::Q4_K || products[i].type == DType::Q6_K) && products[i].group_rows == 16 &&
        n >= kAmxTokens && stored_matmul_amx_available()) {
      amx_tokens = n / kAmxTokens * kAmxTokens;
      amx_act = amx_scratch.get(amx_tokens / kAmxTokens * n_super);
      pack_superblock_activations_for_amx(k_act, amx_tokens, n_super, amx_act);
    }
  // Panels [p_begin, p_end) of product i on the calling thread.
  const auto run_panels = [&](int i, int64_t p_begin, int64_t p_end) {
    const StoredProduct& p = products[i];
    const size_t row_bytes = dtype_row_bytes(p.type, in);
    const bool k_quant = is_k_quant(p.type);
    if (p.group_rows > 0) {
      const int64_t groups_per_panel = kStoredPanelRows / p.group_rows;
      const int64_t n_groups = (p.out + p.group_rows - 1) / p.group_rows;
      const int64_t g_begin = p_begin * groups_per_panel, g_end = std::min(n_groups, p_end * groups_per_panel);
      if (p.group_rows == 16 && k_quant) {
        if (amx_tokens > 0)
          linear_interleaved16_amx_groups(p.type, amx_act, amx_tokens, k_act + amx_tokens * n_super,
                                          n - amx_tokens, n_super, p.w, p.out, p.bias, p.y, g_begin, g_end);
        else
          linear_interleaved16_k_avx512_groups(p.type, k_act, n, n_super, p.w, p.out, p.bias, p.y, g_begin,
                                               g_end);
      } else if (p.group_rows == 16) {
        linear_interleaved16_avx512_groups(p.type, act, act_sums, n,
                                           n_slices, p.w, p.out, p.bias, p.y, g_begin, g_end);
      } else {
        linear_interleaved_avx2_groups(p.type, act, n, n_slices, p.w, p.out, p.bias, p.y, g_begin, g_end);
      }
    } else if (is_half(p.type)) {
      linear_half_avx2_panels(p.type, x, n, in, p.w, row_bytes, p.out, p.bias, p.y, p_begin, p_end);
    } else if (k_quant) {
      linear_k_superblocks_avx2_panels(p.type, k_act, n, n_super, p.w, row_bytes, p.out, p.bias, p.y, p_begin,
                                       p_end);
    } else {
      linear_slices_avx2_panels(p.type, act, n, n_slices, p.w, row_bytes, p.out, p.bias, p.y, p_begin, p_end);
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
