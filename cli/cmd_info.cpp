// `tqserve info`: what a model is, and what its KV cache costs per token in each format.
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/session.h"
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
  nlohmann::json kv = nlohmann::json::object();
  for (KvDtype d : {KvDtype::F32, KvDtype::BF16, KvDtype::F16}) {
    const KvCacheShape shape{c.num_layers, c.num_kv_heads, c.head_dim, 16, d};
    kv[std::string(kv_dtype_name(d))] = shape.bytes_per_token();
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
                      {"kv_bytes_per_token", kv}};
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
  std::printf("chat template:  %s\n", m.chat_template.empty() ? "none" : "yes");
  std::printf("KV bytes/token:");
  for (const auto& [name, bytes] : kv.items()) std::printf(" %s %zu", name.c_str(), bytes.get<size_t>());
  std::printf("\n");
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
