#include "model/config.h"

#include <cmath>
#include <optional>

#include "errors/error.h"
#include "io/gguf.h"
#include "model/architecture.h"

namespace tq {
namespace {

std::string supported_list(bool hf) {
  std::string out;
  for (const ArchitectureSpec* a : architectures()) out += std::string(out.empty() ? "" : ", ") + (hf ? a->hf_class : a->name);
  return out;
}

// The family whose Hugging Face class (hf) or GGUF name is `id`; null when none.
const ArchitectureSpec* find_architecture(const std::string& id, bool hf) {
  for (const ArchitectureSpec* a : architectures())
    if (id == (hf ? a->hf_class : a->name)) return a;
  return nullptr;
}

RopeScaling rope_scaling_from_hf(const nlohmann::json& cfg, const std::string& path) {
  RopeScaling s;
  if (!cfg.contains("rope_scaling") || cfg["rope_scaling"].is_null()) return s;
  const auto& rs = cfg["rope_scaling"];
  if (!rs.is_object()) fail("{}: rope_scaling must be an object", path);
  std::string type = rs.value("rope_type", rs.value("type", std::string("default")));
  if (type == "default") return s;
  s.factor = rs.value("factor", 1.0);
  if (type == "linear") {
    s.type = RopeScaling::Type::Linear;
  } else if (type == "llama3") {
    s.type = RopeScaling::Type::Llama3;
    s.low_freq_factor = rs.value("low_freq_factor", 1.0);
    s.high_freq_factor = rs.value("high_freq_factor", 4.0);
    s.original_max_position = rs.value("original_max_position_embeddings", 8192.0);
  } else {
    fail("{}: rope_scaling type '{}' is not supported (supported: default, linear, llama3)", path, type);
  }
  return s;
}

int json_int(const nlohmann::json& cfg, const char* key, const std::string& path) {
  if (!cfg.contains(key) || !cfg[key].is_number_integer()) fail("{}: '{}' is missing or not an integer", path, key);
  const int64_t v = cfg[key].get<int64_t>();
  if (v < 0 || v > (1 << 30)) fail("{}: '{}' = {} is out of range", path, key, v);
  return static_cast<int>(v);
}

// Optional values: absent or null gives `fallback`; another type names the key.
double json_number_or(const nlohmann::json& cfg, const char* key, double fallback, const std::string& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  if (!cfg[key].is_number()) fail("{}: '{}' must be a number, not {}", path, key, cfg[key].dump());
  return cfg[key].get<double>();
}
int json_int_or(const nlohmann::json& cfg, const char* key, int fallback, const std::string& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  return json_int(cfg, key, path);
}
bool json_bool_or(const nlohmann::json& cfg, const char* key, bool fallback, const std::string& path) {
  if (!cfg.contains(key) || cfg[key].is_null()) return fallback;
  if (!cfg[key].is_boolean()) fail("{}: '{}' must be true or false, not {}", path, key, cfg[key].dump());
  return cfg[key].get<bool>();
}

int gguf_int(const GgufFile& g, const std::string& key, std::optional<int64_t> fallback = std::nullopt) {
  const int64_t v = fallback ? g.get_int_or(key, *fallback) : g.get_int(key);
  if (v < 0 || v > (1 << 30)) fail("{}: '{}' = {} is out of range", g.path(), key, v);
  return static_cast<int>(v);
}

}  // namespace

ModelConfig config_from_hf_object(const nlohmann::json& cfg, const std::string& path);

void ModelConfig::validate(const std::string& source) const {
  auto positive = [&](int v, const char* what) {
    if (v <= 0) fail("{}: {} must be positive (got {})", source, what, v);
  };
  positive(vocab_size, "vocab size");
  positive(hidden_size, "hidden size");
  positive(num_layers, "layer count");
  positive(num_heads, "attention head count");
  positive(num_kv_heads, "KV head count");
  positive(head_dim, "head dim");
  positive(intermediate_size, "feed-forward size");
  positive(max_position, "context length");
  if (num_heads % num_kv_heads != 0)
    fail("{}: {} attention heads are not a multiple of {} KV heads", source, num_heads, num_kv_heads);
  if (num_heads / num_kv_heads > 64) fail("{}: more than 64 query heads per KV head", source);
  if (head_dim % 2 != 0 || head_dim > 512) fail("{}: head dim {} must be even and at most 512", source, head_dim);
  if (!(rope_theta > 0)) fail("{}: rope theta must be positive", source);
  if (!(rms_norm_eps > 0)) fail("{}: rms_norm_eps must be positive", source);
}

std::vector<float> ModelConfig::rope_inv_freq(const std::vector<float>& freq_factors) const {
  std::vector<float> inv_freq = rope_base_inv_freq(head_dim, rope_theta);
  if (!freq_factors.empty()) {
    for (size_t i = 0; i < inv_freq.size() && i < freq_factors.size(); ++i) inv_freq[i] /= freq_factors[i];
    return inv_freq;
  }
  if (rope_scaling.type == RopeScaling::Type::Linear) {
    for (float& f : inv_freq) f = static_cast<float>(f / rope_scaling.factor);
  } else if (rope_scaling.type == RopeScaling::Type::Llama3) {
    // transformers' _compute_llama3_parameters, in fp32 like the reference.
    const double low_wavelen = rope_scaling.original_max_position / rope_scaling.low_freq_factor;
    const double high_wavelen = rope_scaling.original_max_position / rope_scaling.high_freq_factor;
    for (float& f : inv_freq) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / rope_scaling.factor);
      } else if (wavelen >= high_wavelen) {
        const float smooth = static_cast<float>((rope_scaling.original_max_position / wavelen - rope_scaling.low_freq_factor) /
                                                (rope_scaling.high_freq_factor - rope_scaling.low_freq_factor));
        f = (1.0f - smooth) * static_cast<float>(f / rope_scaling.factor) + smooth * f;
      }
    }
  }
  return inv_freq;
}

ModelConfig config_from_hf(const nlohmann::json& cfg, const std::string& path) {
  if (!cfg.is_object()) fail("{}: expected a JSON object", path);
  try {
    return config_from_hf_object(cfg, path);
  } catch (const nlohmann::json::exception& e) {  // a value of the wrong type
    fail("{}: {}", path, e.what());
  }
}

ModelConfig config_from_hf_object(const nlohmann::json& cfg, const std::string& path) {
  ModelConfig c;
  std::string arch_class;
  if (cfg.contains("architectures") && cfg["architectures"].is_array() && !cfg["architectures"].empty() &&
      cfg["architectures"][0].is_string())
    arch_class = cfg["architectures"][0].get<std::string>();
  c.architecture = find_architecture(arch_class, true);
  if (!c.architecture)
    fail("{}: architecture '{}' is not supported (supported: {})", path, arch_class, supported_list(true));
  c.vocab_size = json_int(cfg, "vocab_size", path);
  c.hidden_size = json_int(cfg, "hidden_size", path);
  c.num_layers = json_int(cfg, "num_hidden_layers", path);
  c.num_heads = json_int(cfg, "num_attention_heads", path);
  c.num_kv_heads = cfg.contains("num_key_value_heads") && !cfg["num_key_value_heads"].is_null()
                       ? json_int(cfg, "num_key_value_heads", path)
                       : c.num_heads;
  c.head_dim = cfg.contains("head_dim") && !cfg["head_dim"].is_null() ? json_int(cfg, "head_dim", path)
                                                                       : (c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.arch_name = c.architecture->name;
  c.intermediate_size = json_int(cfg, "intermediate_size", path);
  c.max_position = json_int_or(cfg, "max_position_embeddings", 2048, path);
  c.rope_theta = json_number_or(cfg, "rope_theta", 10000.0, path);
  c.rms_norm_eps = static_cast<float>(json_number_or(cfg, "rms_norm_eps", 1e-6, path));
  c.tie_word_embeddings = json_bool_or(cfg, "tie_word_embeddings", false, path);
  c.rope_scaling = rope_scaling_from_hf(cfg, path);
  c.rope_pairing = RopePairing::Half;
  c.validate(path);
  return c;
}

ModelConfig config_from_gguf(const GgufFile& g) {
  ModelConfig c;
  const std::string arch = g.get_string("general.architecture");
  c.architecture = find_architecture(arch, false);
  if (!c.architecture) fail("{}: architecture '{}' is not supported (supported: {})", g.path(), arch, supported_list(false));
  c.arch_name = c.architecture->name;
  const std::string p = arch + ".";
  c.hidden_size = gguf_int(g, p + "embedding_length");
  c.num_layers = gguf_int(g, p + "block_count");
  c.num_heads = gguf_int(g, p + "attention.head_count");
  c.num_kv_heads = gguf_int(g, p + "attention.head_count_kv", c.num_heads);
  c.head_dim = gguf_int(g, p + "attention.key_length", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
  c.intermediate_size = gguf_int(g, p + "feed_forward_length");
  c.max_position = gguf_int(g, p + "context_length", 2048);
  c.rope_theta = g.get_float_or(p + "rope.freq_base", 10000.0);
  c.rms_norm_eps = static_cast<float>(g.get_float_or(p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (g.has(p + "vocab_size")) {
    c.vocab_size = gguf_int(g, p + "vocab_size");
  } else if (const TensorView* embd = g.find_tensor("token_embd.weight"); embd && !embd->dims.empty()) {
    c.vocab_size = static_cast<int>(embd->dims[0]);
  }
  const std::string scaling = g.get_string_opt(p + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    c.rope_scaling.type = RopeScaling::Type::Linear;
    c.rope_scaling.factor = g.get_float_or(p + "rope.scaling.factor", 1.0);
  } else if (scaling != "none") {
    fail("{}: rope scaling type '{}' is not supported (supported: none, linear; llama3 via rope_freqs)", g.path(), scaling);
  }
  c.rope_pairing = c.architecture->gguf_rope_pairing;
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  c.validate(g.path());
  return c;
}

}  // namespace tq
