// What every model-running subcommand shares: the common flags, loading the model with a
// progress bar, and building the transformer and its KV cache.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "kv/kv_cache.h"
#include "model/loader.h"
#include "model/transformer.h"

namespace tq {

struct ModelOptions {
  std::string model;  // empty: the bundled default model
  int threads = 0;    // 0: all cores
  bool keep_quantized = false;
};

struct CacheOptions {
  std::string kv_cache_dtype = "f16";
  int block_size = 16;
  int max_model_len = 0;  // 0: the model's context length, capped at 8192
};

void add_model_options(CLI::App* cmd, ModelOptions& o);
void add_cache_options(CLI::App* cmd, CacheOptions& o);

// Applies --threads to OpenMP and OpenBLAS.
void apply_threads(int threads);

// Loads the model (progress bar on a terminal when it takes a moment).
LoadedModel load_model_for_cli(const ModelOptions& o, bool with_weights = true);

struct Session {
  LoadedModel model;
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<KvCache> cache;
  int max_model_len = 0;
};

// Heap-allocated: the transformer keeps references into `model`.
std::unique_ptr<Session> open_session(const ModelOptions& mo, const CacheOptions& co);

}  // namespace tq
