// Qwen3: no projection biases; RMSNorm over each q and k head (q_norm, k_norm) before RoPE;
// head_dim is explicit and need not equal hidden / heads.
#include "model/architecture.h"
#include "model/layer_blocks.h"

namespace tq {
namespace {

void qwen3_layer(LayerContext& c) {
  norm_input(c, c.w.attn_norm);  // h = RMSNorm(x)·attn_norm
  project_qkv(c);                // q, k, v = h·Wq, h·Wk, h·Wv
  norm_qk_heads(c);              // q = RMSNorm_head(q)·q_norm, k = RMSNorm_head(k)·k_norm
  rotate_qk(c);                  // RoPE(q), RoPE(k)
  attend(c);                     // cache ← k, v; attn = softmax(q·Kᵀ/√d)·V
  add_attention_output(c);       // x += attn·Wo
  norm_input(c, c.w.ffn_norm);   // h = RMSNorm(x)·ffn_norm
  add_swiglu_mlp(c);             // x += down(silu(gate(h))·up(h))
}

}  // namespace

const ArchitectureSpec kQwen3Architecture{
    .name = "qwen3",
    .hf_class = "Qwen3ForCausalLM",
    .gguf_rope_pairing = RopePairing::Half,
    .qkv_bias = false,
    .qk_norm = true,
    .layer = qwen3_layer,
};

}  // namespace tq
