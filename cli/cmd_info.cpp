// `tqserve info`: what a model is, and what its KV cache costs per token in each format.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/session.h"
#include "errors/error.h"
#include "kernels/stored_matmul.h"
#include "kv/kv_cache.h"

namespace tq {
namespace {

struct InfoFlags {
  ModelOptions model;
  bool json = false;
};

int run_info(const InfoFlags& f) {
  const LoadedModel m = load_model_for_cli(f.model, /*with_weights=*/false);  // metadata only: no conversion
  const ModelConfig& c = m.config;
  // Every dtype this model's head_dim can be stored as: bytes per token (K+V, all layers) and
  // the tokens one GiB of cache holds.
  nlohmann::json kv = nlohmann::json::object(), kv_modes = nlohmann::json::array();
  for (KvDtype d : {KvDtype::F32, KvDtype::BF16, KvDtype::F16, KvDtype::Q8_0, KvDtype::Q4_0, KvDtype::Q4_0H,
                    KvDtype::TQ4, KvDtype::TQ4H, KvDtype::TQ3_5, KvDtype::TQ3, KvDtype::TQ3H, KvDtype::TQ2_5,
                    KvDtype::TQ2, KvDtype::TQ2H, KvDtype::TQ4C, KvDtype::TQ3C, KvDtype::TQ2C, KvDtype::TQ4P,
                    KvDtype::TQ3O, KvDtype::TQ2O}) {
    try {
      check_kv_dtype(d, c.head_dim, /*hadamard_rotation=*/false);
    } catch (const Error&) {
      continue;
    }
    KvCacheShape shape;
    shape.num_layers = c.num_layers;
    shape.num_kv_heads = c.num_kv_heads;
    shape.head_dim = c.head_dim;
    shape.k_dtype = shape.v_dtype = d;
    const std::string name(kv_dtype_name(d));
    kv[name] = shape.bytes_per_token();
    kv_modes.push_back({{"mode", name},
                        {"bits_per_element", kv_bits_per_element(d, c.head_dim)},
                        {"bytes_per_token", shape.bytes_per_token()},
                        {"tokens_per_gib", (size_t{1} << 30) / shape.bytes_per_token()}});
  }
  // The presets and the default-windowed modes as the cache flags build them: bytes per token of
  // the rows, and bits per element of one 1024-token sequence with its windows.
  nlohmann::json presets = nlohmann::json::array();
  for (const char* mode : {"q4_0h", "tq4", "tq3", "tq2"}) {
    CacheOptions o;
    o.kv_cache_dtype = mode;
    KvCacheShape shape;
    try {
      shape = cache_shape_for(o, c);
    } catch (const Error&) {
      continue;
    }
    presets.push_back({{"mode", mode},
                       {"k", kv_dtype_name(shape.k_dtype)},
                       {"v", kv_dtype_name(shape.v_dtype)},
                       {"windows", shape.windows.describe()},
                       {"bytes_per_token", shape.bytes_per_token()},
                       {"bits_per_element_at_1024", shape.bits_per_element_at(1024)}});
  }
  nlohmann::json dtypes = m.stored_dtypes;
  nlohmann::json j = {{"path", m.path},
                      {"format", m.format},
                      {"architecture", c.arch_name},
                      {"parameters", m.num_params},
                      {"stored_bytes", m.stored_bytes},
                      {"stored_dtypes", dtypes},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.hidden_size},
                      {"layers", c.num_layers},
                      {"attention_heads", c.num_heads},
                      {"kv_heads", c.num_kv_heads},
                      {"head_dim", c.head_dim},
                      {"intermediate_size", c.intermediate_size},
                      {"context_length", c.max_position},
                      {"rope_theta", c.rope_theta},
                      {"tied_embeddings", c.tie_word_embeddings},
                      {"chat_template", !m.chat_template.empty()},
                      {"kv_bytes_per_token", kv},
                      {"kv_modes", kv_modes},
                      {"kv_presets", presets},
                      {"weight_kernels", stored_weight_kernels()}};
  if (f.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model:          %s (%s)\n", m.path.c_str(), m.format.c_str());
  std::printf("architecture:   %s\n", c.arch_name.c_str());
  std::printf("parameters:     %.1f M (%.1f MiB stored)\n", m.num_params / 1e6, m.stored_bytes / 1048576.0);
  std::printf("stored dtypes: ");
  for (const auto& [name, count] : m.stored_dtypes) std::printf(" %s×%d", name.c_str(), count);
  std::printf("\nlayers:         %d, hidden %d, ffn %d, vocab %d\n", c.num_layers, c.hidden_size, c.intermediate_size,
              c.vocab_size);
  std::printf("attention:      %d heads, %d KV heads, head dim %d, rope theta %g\n", c.num_heads, c.num_kv_heads,
              c.head_dim, c.rope_theta);
  std::printf("context length: %d\n", c.max_position);
  std::printf("weight kernels: %s\n", stored_weight_kernels().c_str());
  std::printf("chat template:  %s\n", m.chat_template.empty() ? "none" : "yes");
  std::printf("KV cache:       %-6s %10s %12s %14s\n", "mode", "bits/elem", "bytes/token", "tokens/GiB");
  for (const auto& row : kv_modes)
    std::printf("                %-6s %10.2f %12zu %14zu\n", row["mode"].get<std::string>().c_str(),
                row["bits_per_element"].get<double>(), row["bytes_per_token"].get<size_t>(),
                row["tokens_per_gib"].get<size_t>());
  std::printf("KV presets:     %-6s %-12s %10s  %s\n", "mode", "k/v", "bits@1024", "windows (rows read at full precision)");
  for (const auto& row : presets)
    std::printf("                %-6s %-12s %10.2f  %s\n", row["mode"].get<std::string>().c_str(),
                (row["k"].get<std::string>() + "/" + row["v"].get<std::string>()).c_str(),
                row["bits_per_element_at_1024"].get<double>(), row["windows"].get<std::string>().c_str());
  return 0;
}

}  // namespace

void register_info(CLI::App& app, std::function<int()>& action) {
  auto flags = std::make_shared<InfoFlags>();
  CLI::App* cmd = app.add_subcommand("info", "describe a model");
  add_model_options(cmd, flags->model);
  cmd->add_flag("--json", flags->json, "print one JSON object");
  cmd->callback([flags, &action] { action = [flags] { return run_info(*flags); }; });
}

}  // namespace tq
