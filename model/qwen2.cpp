// Qwen2 / Qwen2.5: the Llama layer with biases on the q, k and v projections (the loader
// requires them), rotate_half RoPE.
#include "model/layer_blocks.h"

namespace tq {

void qwen2_layer(LayerContext& c) {
  norm_input(c, c.w.attn_norm);  // h = RMSNorm(x)
  project_qkv(c);                // q, k, v = h·W + b
  rotate_qk(c);
  attend(c);
  add_attention_output(c);
  add_swiglu_mlp(c);
}

}  // namespace tq
