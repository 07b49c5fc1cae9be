// What every model-running subcommand shares: the common flags, loading the model with a
// progress bar, and building the transformer and its KV cache.
#pragma once
#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/kv_calibration.h"
#include "eval/kv_auto.h"
#include "kv/kv_cache.h"
#include "model/loader.h"
#include "model/transformer.h"

namespace tq {

struct ModelOptions {
  std::string model;  // empty: the bundled default model
  int threads = 0;    // 0: all cores
  bool dequantize_weights = false;
  bool no_repack = false;  // keep Q4_1/Q8_0 rows as the file stores them (LoadOptions::interleave_weights)
  std::string device = "cpu";  // --device: cpu or cuda (model/device_forward.h)
};

struct CacheOptions {
  std::string kv_cache_dtype = "f16";
  std::string kv_cache_dtype_k;  // empty: kv_cache_dtype
  std::string kv_cache_dtype_v;  // empty: kv_cache_dtype
  int protect_layers = 0;
  // Windows (KvWindows); < 0 / empty: default_kv_windows() for modes they apply to.
  int sink_tokens = -1;
  int recent_tokens = -1;
  std::string window_dtype;
  std::string tq_rotation = "dense";
  std::string tq_codebook = "beta";
  uint64_t tq_seed = KvQuantOptions{}.seed;
  std::string tq_scale = "least-squares";
  std::string tq_keys = "centered";
  bool tq_center_values = false;
  std::string kv_chunk_rows = "stored";  // or "exact" (KvQuantOptions::exact_chunk_rows)
  std::string fp_attention = "fast";     // or "exact" (KvQuantOptions::exact_fp_attention)
  std::string kv_key_scores = "int8";    // or "fp32" (KvQuantOptions::int8_key_scores)
  std::string kv_value_sums = "int8";    // or "fp32" (KvQuantOptions::int8_value_sums)
  std::string calibration_file = kDefaultCalibrationFile;
  int block_size = 16;
  int max_model_len = 0;  // 0: the model's context length, capped at 8192
  bool log_cache = true;  // print the cache's size and layout to stderr when it is built
};

void add_model_options(CLI::App* cmd, ModelOptions& o);
// --device cpu|cuda, for the commands that run the model (generate, chat, serve, bench decode, eval).
void add_device_option(CLI::App* cmd, ModelOptions& o);
// With --device cuda: fails (naming the mode) when the cache flags ask for a cache the GPU cannot
// hold, before any weights are uploaded. Nothing for --device cpu.
void check_device_cache_flags(const ModelOptions& mo, const CacheOptions& co, const ModelConfig& c);
// With --device cuda: loads the weights onto the GPU and prints the device. Caches made for the
// model afterwards (make_cache) keep their rows there; Transformer::prepare_cache makes the pages.
void attach_device(const ModelOptions& o, Transformer& model);
void add_cache_options(CLI::App* cmd, CacheOptions& o);

// The cache layout and quantizer settings the flags ask for; fails with the valid choices. For
// `--kv-cache-dtype auto[:KLD]` the per-layer dtypes are left to resolve_cache_shape().
KvCacheShape cache_shape_for(const CacheOptions& o, const ModelConfig& c);
KvQuantOptions quant_options_for(const CacheOptions& o);
// "KV cache: tq4, 512 blocks of 16 tokens (8192 tokens), 13.5 MiB, 1728 bytes/token"
std::string describe_cache(const KvCache& cache);
// Builds a cache of `num_blocks` blocks, calibrating first (one f32 prefill of the calibration
// text) when a tq dtype uses key centers or a split dtype needs outlier channels. `reuse`, when
// given, keeps the calibration across calls with the same calibration flags (eval's modes).
std::unique_ptr<KvCache> make_cache(const CacheOptions& o, const KvCacheShape& shape, int num_blocks,
                                    Transformer& model, const Tokenizer* tokenizer,
                                    std::optional<KvCalibration>* reuse = nullptr);

// cache_shape_for(), and for `auto[:KLD]` each layer's K and V dtype chosen on the calibration
// text (eval/kv_auto.h; prints the progress and the prediction to stderr). `reuse` as for
// make_cache(); `reuse_auto` keeps the (budget-independent) measurement across calls with the
// same calibration and window flags (eval's modes).
KvCacheShape resolve_cache_shape(const CacheOptions& o, const ModelConfig& c, Transformer& model,
                                 const Tokenizer* tokenizer, std::optional<KvCalibration>* reuse = nullptr,
                                 std::optional<KvAutoMeasurement>* reuse_auto = nullptr);

// --max-model-len, or the model's context capped at 8192; fails when it exceeds the model's.
int resolve_max_model_len(const CacheOptions& o, const ModelConfig& c);

// Applies --threads to OpenMP and OpenBLAS.
void apply_threads(int threads);

// The non-empty items of a comma-separated flag value ("f16,,tq4" -> f16, tq4).
std::vector<std::string> split_list(const std::string& text);

// With --device cuda on a machine without a usable GPU (or a build without CUDA): prints one line
// saying so and exits with status 2.
void require_device(const ModelOptions& o);

// Loads the model (progress bar on a terminal when it takes a moment), after require_device().
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
