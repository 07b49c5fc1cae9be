// How one side (K or V) of one layer stores its rows: the dtype, and for quantized dtypes the
// per-layer state the format needs: the rotation (seeded per layer, shared by K and V of the
// layer), the Lloyd-Max codebooks, and for split dtypes each KV head's outlier channel order.
//
// "Storage space" is the space a stored row lives in before its values are coded: x itself for
// f32/bf16/f16/q8_0/q4_0, R x for q4_0h and tq<b>, and [R_h (P x)[0, d/2), R_h (P x)[d/2, d)]
// for split dtypes (P the head's channel permutation putting its outlier group first), and
// diag(1/sigma) U x for channel-bit dtypes (U the head's calibrated axes as rows, sigma their
// standard deviations; queries map by diag(sigma) U, so q . k keeps its value). Attention
// maps q into K's storage space once per head and the output back from V's once per head.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/coded_row.h"
#include "kv/kv_dtype.h"
#include "quant/channel_bits.h"
#include "quant/codebook.h"
#include "quant/orthant_codebook.h"
#include "quant/pair_codebook.h"
#include "quant/rotation.h"
#include "quant/tq_row.h"

namespace tq {

struct KvQuantOptions {
  RotationKind rotation = RotationKind::dense;  // tq dtypes (q4_0h is always Hadamard)
  uint64_t seed = 0x7471736572766531ull;        // "tqserve1"; rotation of layer l = f(seed, l)
  CodebookKind codebook = CodebookKind::beta;
  TqScaleMode scale_mode = TqScaleMode::least_squares;  // measured best (docs/FIDELITY.md)
  // tq dtypes: the calibrated affine maps (KvAffine below) to use.
  // Defaults from `tqserve eval kl` on SmolLM2 (docs/FIDELITY.md): centering keys helps,
  // scaling keys and centering values do not.
  bool center_keys = true;
  bool scale_keys = false;
  bool center_values = false;
  // Within a prefill chunk, whether a token reads the chunk's own K/V rows exactly (unquantized,
  // in storage space) or as stored. Stored is the default: a token's output then does not depend
  // on how its prompt was chunked or batched (docs/FIDELITY.md measures both).
  bool exact_chunk_rows = false;
  // Whether full-precision layers attend with the plain loop's arithmetic (paged_attention_exact:
  // one position at a time, no fused multiply-add, one KV head per thread) instead of the fast
  // kernel over context parts that quantized layers use. The fast kernel is the default: its
  // order is fixed per output too, so every invariance holds, and it keeps both threads busy on
  // one long sequence; the exact one reproduces the FP path's logits of before it existed.
  bool exact_fp_attention = false;
  // Whether 2- to 4-bit TurboQuant keys (tq<b>, tq<b>h, tq4p rows; tq3o / tq2o rows have no integer
  // kernels yet and are always read as fp32) are scored in integer arithmetic (the query head and the
  // codebook in int8, exact dot products: kernels/tq_key_scores.h) where the CPU has AVX-512 VNNI,
  // instead of decoding each key to fp32 first. docs/FIDELITY.md and docs/BENCHMARKS.md measure both.
  bool int8_key_scores = true;
  // Whether 2- to 4-bit TurboQuant values are summed in integer arithmetic (each head's weights of
  // a tile of 16 rows in bytes, the codebook in int8: kernels/tq_value_sums.h) where the CPU has
  // AVX-512 VNNI and VBMI, instead of decoding each value row to fp32 first.
  bool int8_value_sums = true;
  // Rows these may read (2- to 4-bit TurboQuant rows, keys and values alike: a codec does not
  // know its side) are coded with the codebook's levels on the
  // int8 grid of that arithmetic (quant/codebook.h: snapped_to_int8_grid), on every CPU; other
  // rows, and all rows with both off, with the Lloyd-Max levels as they are.
};

// Split dtypes: per layer and KV head, a permutation of [0, head_dim) whose first half is the
// outlier group (engine/kv_calibration.h computes it). Empty: channel order as is.
struct OutlierPartition {
  std::vector<std::vector<std::vector<int>>> k_order, v_order;  // [layer][kv head][head_dim]
};

// Per layer and KV head, an exact affine change of variables applied to rows before they are
// quantized (values from calibration, engine/kv_calibration.h):
//   keys:   k~ = (k - mu_k) / s  (per channel), queries q~ = q * s, so q~ . k~ = q . k - q . mu_k;
//           the q . mu_k term is the same at every position, which softmax ignores.
//   values: v~ = v - mu_v; sum_i p_i v_i = sum_i p_i v~_i + mu_v since the p_i sum to 1.
// Removing a large shared component (a per-channel bias, as Qwen2/3 keys have) leaves the
// quantizer only what varies between tokens; the key scale s_j = sqrt(sigma_k,j / sigma_q,j)
// moves key energy out of channels queries barely read, which minimizes the expected score error
// E[(q~ . e)^2] ~ |q~|^2 |k~|^2 of a rotation-based quantizer (Cauchy-Schwarz).
struct KvAffine {
  std::vector<std::vector<std::vector<float>>> k_mean, v_mean, k_scale;  // [layer][kv head][head_dim]
};

// Channel-bit dtypes: per layer, the K and V sides' layouts and axes (from the calibration's
// spectra, engine/kv_calibration.h, at the side's bits). Empty for a side without them.
struct KvChannelCodings {
  std::vector<ChannelCoding> k, v;  // [layer]
};

class KvRowCodec {
 public:
  // order: split dtypes only, per KV head (empty: identity).
  // center, scale: per KV head (empty: none); only for quantized dtypes (see KvAffine).
  // channels: channel-bit dtypes only (required there), the layer side's layout and per-head axes.
  KvRowCodec(KvDtype dtype, int head_dim, int layer, const KvQuantOptions& options,
             std::vector<std::vector<int>> order = {}, std::vector<std::vector<float>> center = {},
             std::vector<std::vector<float>> scale = {}, ChannelCoding channels = {});

  KvDtype dtype() const { return dtype_; }
  int head_dim() const { return d_; }
  size_t row_bytes() const { return kv_row_bytes(dtype_, d_); }
  // False when storage space is x itself (no per-head mapping needed).
  bool transforms() const { return kv_dtype_is_rotated(dtype_); }
  // The format descriptor the attention kernel decodes (points into this codec's codebooks).
  CodedRowFormat row_format() const;

  // x: [head_dim] of KV head `head` → row [row_bytes()] ((x - center) / scale is coded).
  void encode(const float* x, int head, uint8_t* row) const;
  // Full reconstruction of a stored row, scale and center applied back (tests and tools;
  // attention never does this).
  void decode(const uint8_t* row, int head, float* x) const;
  // Attention's two per-head maps: a query into this (K) side's storage space, q * scale then
  // the linear map; and an output out of this (V) side's storage space, plus the center.
  void query_to_storage(const float* q, int head, float* y) const;
  void output_from_storage(const float* y, int head, float* x) const;
  // y = storage-space image of x (the linear map alone, no centering); and its inverse.
  // x and y may not alias.
  void to_storage(const float* x, int head, float* y) const;
  // The storage-space row encode() codes for x, before coding: to_storage((x - center) / scale).
  void exact_storage_row(const float* x, int head, float* y) const;
  void from_storage(const float* y, int head, float* x) const;

  const std::vector<int>& order(int head) const;
  // What a TurboQuant row (tq<b>, tq<b>h) is coded with, for another device's encoder to code it
  // the same way (kernels/cuda/tq_encode.h): the layer's rotation, the codebook, the scale's rule.
  const Rotation& rotation() const { return rot_; }
  // Fails for tq4p, tq3o and tq2o, whose rows are coded with pair_codebook() / orthant_codebook() instead.
  const Codebook& codebook() const;
  // tq4p: the shared pair codebook (null for other dtypes).
  const PairCodebook* pair_codebook() const { return pairs_; }
  // tq3o, tq2o: the shared orthant codebook (null for other dtypes).
  const OrthantCodebook* orthant_codebook() const { return orthant_; }
  TqScaleMode scale_mode() const { return scale_mode_; }
  // The head's center / scale, or null when there is none.
  const float* center(int head) const;
  const float* scale(int head) const;

 private:
  KvDtype dtype_;
  int d_;
  TqScaleMode scale_mode_;
  Rotation rot_;           // q4_0h, tq<b>: d x d; split: d/2 x d/2 for both halves
  Codebook cb_hi_, cb_lo_;  // tq<b>: cb_hi_; split: first / second half
  std::vector<std::vector<int>> order_;    // split: per KV head
  std::vector<std::vector<float>> center_;  // per KV head, or empty
  std::vector<std::vector<float>> scale_;   // per KV head, or empty
  ChannelCoding channels_;                  // channel-bit dtypes
  std::vector<Codebook> channel_codebooks_;  // [bits], standard normal, for the widths the layout uses
  const PairCodebook* pairs_ = nullptr;      // tq4p: the shared codebook for head_dim
  const OrthantCodebook* orthant_ = nullptr;  // tq3o, tq2o: the shared codebook for head_dim and bits

  const float* channel_basis(int head) const;  // [d*d]
  const float* channel_sigma(int head) const;  // [d]
};

}  // namespace tq
