// The shared pieces the per-architecture layer functions are written in.
#pragma once
#include <vector>

#include "model/transformer.h"

namespace tq {

// buf.h = RMSNorm(buf.x) · weight
void norm_input(LayerContext& c, const std::vector<float>& weight);
// buf.q, buf.k, buf.v = h · Wq/Wk/Wvᵀ (+ bias when the checkpoint has one)
void project_qkv(LayerContext& c);
// Qwen3: RMSNorm over head_dim of every q and k head.
void norm_qk_heads(LayerContext& c);
// RoPE on q and k at each token's position.
void rotate_qk(LayerContext& c);
// Store k, v in the paged cache, then buf.attn = causal attention of q over the cache.
void attend(LayerContext& c);
// x += attn · Woᵀ
void add_attention_output(LayerContext& c);
// x += down(silu(gate(h)) * up(h)), h as norm_input left it
void add_swiglu_mlp(LayerContext& c);

// The Llama layer, which other families reuse as it is (Qwen2).
void llama_layer(LayerContext& c);

}  // namespace tq
