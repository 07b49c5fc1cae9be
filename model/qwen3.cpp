// Qwen3: no projection biases; RMSNorm over each q and k head (q_norm, k_norm) before RoPE;
// head_dim is explicit and need not equal hidden / heads.
#include "model/layer_blocks.h"

namespace tq {

void qwen3_layer(LayerContext& c) {
  norm_input(c, c.w.attn_norm);  // h = RMSNorm(x)
  project_qkv(c);                // q, k, v = h·Wq, h·Wk, h·Wv
  norm_qk_heads(c);              // q = RMSNorm_head(q)·q_norm, k = RMSNorm_head(k)·k_norm
  rotate_qk(c);
  attend(c);
  add_attention_output(c);
  add_swiglu_mlp(c);
}

}  // namespace tq
