// Everything that makes one architecture family: its names in the two checkpoint formats, what
// its checkpoints must hold, its RoPE pairing and its layer function. Each family's file
// (model/llama.cpp, qwen2.cpp, qwen3.cpp) defines one spec; architectures() lists them, and the
// config reader, the loader and the forward pass ask the spec instead of naming families.
// Adding a family: write its file (spec + layer function in the pieces of layer_blocks.h) and
// add it to the list in architecture.cpp.
#pragma once
#include <span>

#include "kernels/rope.h"

namespace tq {

struct LayerContext;

struct ArchitectureSpec {
  const char* name;      // GGUF general.architecture and ModelConfig::arch_name: "qwen3"
  const char* hf_class;  // config.json "architectures"[0]: "Qwen3ForCausalLM"
  // How RoPE pairs the dimensions of a GGUF file's q and k (Hugging Face checkpoints always
  // rotate halves): llama.cpp's converter permutes Llama's q/k rows for adjacent pairs.
  RopePairing gguf_rope_pairing;
  bool qkv_bias;  // the q, k and v projections must have biases (optional ones are read anyway)
  bool qk_norm;   // RMSNorm weights for every q and k head (q_norm, k_norm)
  void (*layer)(LayerContext& c);  // one decoder layer
};

extern const ArchitectureSpec kLlamaArchitecture;
extern const ArchitectureSpec kQwen2Architecture;
extern const ArchitectureSpec kQwen3Architecture;

// Every supported family.
std::span<const ArchitectureSpec* const> architectures();

}  // namespace tq
