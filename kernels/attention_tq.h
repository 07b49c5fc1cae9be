// Causal GQA attention for one query token over TurboQuant-coded paged K/V rows, computed in
// rotated space (DESIGN.md section 5). A K or V row is b-bit codebook indices plus an fp32 scale
// (row layout and packing: kernels/tq_packing.h); its reconstruction is scale * R^T c[idx], and
// since R is orthogonal
//   q . (scale_k R^T c_k[idx_k]) = scale_k * (R q) . c_k[idx_k],
//   sum_i p_i scale_v[i] R^T c_v[idx_v[i]] = R^T (sum_i p_i scale_v[i] c_v[idx_v[i]]),
// so the kernel takes q' = R q, works on codebook levels only, and returns o' in rotated space;
// the caller applies R^T once per query head. No key or value row is ever reconstructed.
//
// Like paged_attention_fp: online softmax (running max and sum per query head, fp32), and each
// K/V row is decoded once per KV head group for all of that group's query heads.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tq {

// One layer's TurboQuant K (or V) pages: row (block b, kv head g, offset o) starts at
// base + b * block_stride + g * head_stride + o * row_stride; a row is tq_row_bytes(d, bits)
// bytes (packed codes, then the fp32 scale).
struct TqPagedRows {
  const uint8_t* base = nullptr;
  size_t block_stride = 0;
  size_t head_stride = 0;
  size_t row_stride = 0;
};

struct TqAttentionArgs {
  const float* q_rot = nullptr;  // [n_q_heads, head_dim], already rotated: q' = R q
  int n_q_heads = 0;
  int n_kv_heads = 0;  // n_q_heads % n_kv_heads == 0
  int head_dim = 0;    // <= 512; must satisfy the packing requirement of both bit widths
  const int32_t* block_table = nullptr;  // [ceil(n_ctx / block_size)]
  int block_size = 0;
  int n_ctx = 0;  // attend to positions [0, n_ctx); 0 gives zero outputs
  TqPagedRows k, v;
  int k_bits = 4, v_bits = 4;          // 1..4
  const float* k_codebook = nullptr;   // [2^k_bits] levels
  const float* v_codebook = nullptr;   // [2^v_bits]
  float scale = 1.0f;                  // 1/sqrt(head_dim)
  float* out_rot = nullptr;  // [n_q_heads, head_dim] in rotated space; caller applies R^T
};

// The best kernel for this CPU (runtime dispatch: AVX2+FMA when available, else scalar).
void paged_attention_tq(const TqAttentionArgs& args);
// Plain reference kernel.
void paged_attention_tq_scalar(const TqAttentionArgs& args);

// The AVX2+FMA kernel (SIMD row decode for bits 2, 3, 4 when head_dim is a multiple of
// 32 / 64 / 16 respectively, a scalar decode otherwise; SIMD dot products and accumulation).
// Usable iff paged_attention_tq_avx2_available(head_dim); fails otherwise.
bool paged_attention_tq_avx2_available(int head_dim);
void paged_attention_tq_avx2(const TqAttentionArgs& args);

}  // namespace tq
