// Qwen2 / Qwen2.5: the Llama layer with biases on the q, k and v projections (required), and
// rotate_half RoPE in GGUF files too.
#include "model/architecture.h"
#include "model/layer_blocks.h"

namespace tq {

const ArchitectureSpec kQwen2Architecture{
    .name = "qwen2",
    .hf_class = "Qwen2ForCausalLM",
    .gguf_rope_pairing = RopePairing::Half,
    .qkv_bias = true,
    .qk_norm = false,
    .layer = llama_layer,
};

}  // namespace tq
