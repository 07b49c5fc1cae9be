// The weights of a decoder-only transformer, fp32 in memory (quantized files are dequantized
// at load; native quantized kernels come with the performance work).
#pragma once
#include <cstdint>
#include <vector>

namespace tq {

// A torch.nn.Linear: y = x · Wᵀ + b.
struct LinearWeights {
  std::vector<float> w;     // [out, in]
  std::vector<float> bias;  // [out] or empty
  int64_t out = 0;
  int64_t in = 0;
  const float* bias_or_null() const { return bias.empty() ? nullptr : bias.data(); }
};

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
  std::vector<float> token_embedding;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;       // [hidden]
  LinearWeights lm_head;               // [vocab, hidden]; empty w when tied to the embedding
  std::vector<float> rope_freq_factors;  // [head_dim / 2] (GGUF rope_freqs) or empty
};

}  // namespace tq
