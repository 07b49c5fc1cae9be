// The weights of a decoder-only transformer. Matrices stay in the format the file stores them
// in when kernels/stored_matmul.h multiplies that format (F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K,
// Q5_K, Q6_K); F32 and any other type are fp32 in memory.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernels/dtype.h"
#include "memory/huge_pages.h"

namespace tq {

// A torch.nn.Linear: y = x · Wᵀ + b.
struct LinearWeights {
  DType dtype = DType::F32;
  std::vector<float> w;         // [out, in] when dtype is F32
  LargeBytes packed;            // [out] rows of `in` values in `dtype` blocks otherwise
  int group_rows = 0;           // > 0: packed is in kernels/interleaved_rows.h's layout, groups of this many rows
  std::vector<float> bias;      // [out] or empty
  int64_t out = 0;
  int64_t in = 0;
  const float* bias_or_null() const { return bias.empty() ? nullptr : bias.data(); }
  bool empty() const { return w.empty() && packed.empty(); }
};

// y[n, out] = x[n, in] · Wᵀ + b
void apply_linear(const LinearWeights& lw, const float* x, int64_t n, float* y);
// Several linears of the same input x[n, in], each y[n, out_i] exactly as apply_linear gives it;
// stored weights share one activation quantization and one parallel loop (kernels/stored_matmul.h).
struct LinearOutput {
  const LinearWeights& lw;
  float* y;
};
void apply_linears(std::initializer_list<LinearOutput> outputs, const float* x, int64_t n);
// dst[in] = row `index` of W as fp32 (embedding lookup)
void linear_row(const LinearWeights& lw, int64_t index, float* dst);

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  LinearWeights wq;              // [n_heads * head_dim, hidden]
  LinearWeights wk;              // [n_kv_heads * head_dim, hidden]
  LinearWeights wv;              // [n_kv_heads * head_dim, hidden]
  LinearWeights wo;              // [hidden, n_heads * head_dim]
  std::vector<float> q_norm;     // [head_dim], Qwen3 only
  std::vector<float> k_norm;     // [head_dim], Qwen3 only
  std::vector<float> ffn_norm;   // [hidden]
  LinearWeights w_gate;          // [ffn, hidden]
  LinearWeights w_up;            // [ffn, hidden]
  LinearWeights w_down;          // [hidden, ffn]
};

struct ModelWeights {
  LinearWeights token_embedding;        // [vocab, hidden]; also the LM head when tied
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;       // [hidden]
  LinearWeights lm_head;               // [vocab, hidden]; empty when tied to the embedding
  std::vector<float> rope_freq_factors;  // [head_dim / 2] (GGUF rope_freqs) or empty
};

}  // namespace tq
