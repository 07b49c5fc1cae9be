// Hyper-parameters of a decoder-only transformer, read from a HF config.json or GGUF metadata.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "kernels/rope.h"

namespace tq {

class GgufFile;
struct ArchitectureSpec;

struct RopeScaling {
  enum class Type { None, Linear, Llama3 };
  Type type = Type::None;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192;
};

struct ModelConfig {
  const ArchitectureSpec* architecture = nullptr;  // model/architecture.h; set by the readers below
  std::string arch_name;  // architecture->name: "llama", "qwen2", "qwen3"
  int vocab_size = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;
  int max_position = 0;  // context length the model was trained for
  double rope_theta = 10000.0;
  float rms_norm_eps = 1e-6f;
  RopeScaling rope_scaling;
  RopePairing rope_pairing = RopePairing::Half;  // the spec's gguf_rope_pairing in GGUF files
  bool tie_word_embeddings = false;

  // Throws tq::Error naming `source` when a value is missing, non-positive or inconsistent.
  void validate(const std::string& source) const;
  // RoPE frequencies [head_dim / 2] after scaling; `freq_factors` (GGUF rope_freqs, may be
  // empty) divides them as llama.cpp does.
  std::vector<float> rope_inv_freq(const std::vector<float>& freq_factors) const;
};

ModelConfig config_from_hf(const nlohmann::json& config, const std::string& path);
ModelConfig config_from_gguf(const GgufFile& gguf);

}  // namespace tq
