// Llama family (Llama 2/3, SmolLM2): pre-norm attention and SwiGLU MLP; optional biases
// (attention_bias) are applied when the checkpoint has them.
#include "model/architecture.h"
#include "model/layer_blocks.h"

namespace tq {

void llama_layer(LayerContext& c) {
  norm_input(c, c.w.attn_norm);  // h = RMSNorm(x)·attn_norm
  project_qkv(c);                // q, k, v = h·Wq, h·Wk, h·Wv (+ b)
  rotate_qk(c);                  // RoPE(q), RoPE(k)
  attend(c);                     // cache ← k, v; attn = softmax(q·Kᵀ/√d)·V
  add_attention_output(c);       // x += attn·Wo
  norm_input(c, c.w.ffn_norm);   // h = RMSNorm(x)·ffn_norm
  add_swiglu_mlp(c);             // x += down(silu(gate(h))·up(h))
}

const ArchitectureSpec kLlamaArchitecture{
    .name = "llama",
    .hf_class = "LlamaForCausalLM",
    .gguf_rope_pairing = RopePairing::Adjacent,
    .qkv_bias = false,
    .qk_norm = false,
    .layer = llama_layer,
};

}  // namespace tq
