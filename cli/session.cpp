#include "cli/session.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "errors/error.h"

namespace tq {

void add_model_options(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("-m,--model", o.model, "GGUF file or Hugging Face model folder (default: bundled SmolLM2-135M-Instruct)");
  cmd->add_option("-t,--threads", o.threads, "threads (default: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_flag("--keep-quantized-weights", o.keep_quantized,
                "keep Q4_0/Q4_1/Q8_0 weights in their blocks, multiplied with 8-bit activations as llama.cpp "
                "does (less memory; default: fp32 weights, exact float maths)");
}

void add_cache_options(CLI::App* cmd, CacheOptions& o) {
  cmd->add_option("--kv-cache-dtype", o.kv_cache_dtype, "KV cache element type: " + kv_dtype_choices())
      ->capture_default_str();
  cmd->add_option("--block-size", o.block_size, "tokens per KV cache block")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--max-model-len", o.max_model_len, "context length (default: the model's, at most 8192)")
      ->check(CLI::Range(0, 1 << 24));
}

void apply_threads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

LoadedModel load_model_for_cli(const ModelOptions& o, bool with_weights) {
  apply_threads(o.threads);
  const std::string path = o.model.empty() ? find_default_model() : o.model;
  const bool tty = isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  int last_percent = -1;
  auto progress = [&](double fraction) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int percent = static_cast<int>(fraction * 100);
    if (!tty || elapsed < 0.3 || percent == last_percent) return;  // only when it takes a moment
    last_percent = percent;
    const int width = 30, filled = percent * width / 100;
    std::fprintf(stderr, "\rloading %s [%.*s%*s] %3d%%", path.c_str(), filled, "##############################",
                 width - filled, "", percent);
    std::fflush(stderr);
  };
  LoadOptions options;
  options.with_weights = with_weights;
  options.keep_quantized = o.keep_quantized;
  LoadedModel m = load_model(path, options, progress);
  if (last_percent >= 0) std::fprintf(stderr, "\n");
  return m;
}

std::unique_ptr<Session> open_session(const ModelOptions& mo, const CacheOptions& co) {
  auto session = std::make_unique<Session>();
  Session& s = *session;
  const auto dtype = parse_kv_dtype(co.kv_cache_dtype);
  if (!dtype) fail("--kv-cache-dtype '{}' is not one of: {}", co.kv_cache_dtype, kv_dtype_choices());
  s.model = load_model_for_cli(mo);
  const ModelConfig& c = s.model.config;
  s.max_model_len = co.max_model_len > 0 ? co.max_model_len : std::min(c.max_position, 8192);
  if (s.max_model_len > c.max_position)
    fail("--max-model-len {} exceeds the model's context length {}", s.max_model_len, c.max_position);
  KvCacheShape shape{c.num_layers, c.num_kv_heads, c.head_dim, co.block_size, *dtype};
  const int blocks = (s.max_model_len + co.block_size - 1) / co.block_size;
  s.cache = std::make_unique<KvCache>(shape, blocks);
  s.transformer = std::make_unique<Transformer>(s.model.config, s.model.weights);
  return session;
}

}  // namespace tq
