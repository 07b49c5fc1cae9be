// Fuzzes the Hugging Face model-folder readers: safetensors files (SafetensorsSet), config.json
// (config_from_hf), tokenizer.json (Tokenizer::from_hf_dir) and a whole folder (load_model).
// The first input byte picks the mode; the rest is the file content. Production treats
// tq::Error as the rejection of a bad file (the loader turns JSON syntax errors into tq::Error
// too), so that is all this harness catches.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "errors/error.h"
#include "fuzz/fuzz_common.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace {

void exercise_set(const tq::SafetensorsSet& set) {
  for (const std::string& name : set.names()) {
    const tq::TensorView* t = set.find(name);
    if (t == nullptr) tq::fuzz::invariant_failed("find misses a listed tensor");
    (void)set.source_of(name);
    if (t->nbytes > 0) {
      volatile uint8_t sink = t->data[0];
      sink = t->data[t->nbytes - 1];
      (void)sink;
    }
  }
}

// Splits "<config.json>\0<rest>" (no NUL: everything is the first part).
std::pair<std::string_view, std::string_view> split_nul(std::string_view s) {
  const size_t nul = s.find('\0');
  if (nul == std::string_view::npos) return {s, {}};
  return {s.substr(0, nul), s.substr(nul + 1)};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int mode = data[0] % 4;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (mode) {
      case 0: {  // one safetensors file
        const std::string path = tq::fuzz::write_scratch("single.safetensors", rest);
        exercise_set(tq::SafetensorsSet::open_file(path));
        break;
      }
      case 1: {  // config.json, parsed as the loader does (read_json_file)
        nlohmann::json cfg;
        try {
          cfg = nlohmann::json::parse(rest.begin(), rest.end());
        } catch (const nlohmann::json::exception&) {
          return 0;  // read_json_file reports this as tq::Error before config_from_hf runs
        }
        const tq::ModelConfig c = tq::config_from_hf(cfg, "config.json");
        (void)c.rope_inv_freq({});
        break;
      }
      case 2: {  // a model folder: config.json NUL model.safetensors
        const auto [config, tensors] = split_nul(rest);
        tq::fuzz::write_scratch("model/config.json", config);
        tq::fuzz::write_scratch("model/model.safetensors", tensors);
        tq::LoadOptions options;
        options.dequantize_weights = true;
        (void)tq::load_model(tq::fuzz::scratch_dir() + "/model", options);
        break;
      }
      case 3: {  // tokenizer.json NUL tokenizer_config.json
        const auto [tokenizer, config] = split_nul(rest);
        tq::fuzz::write_scratch("tok/tokenizer.json", tokenizer);
        if (!config.empty()) {
          tq::fuzz::write_scratch("tok/tokenizer_config.json", config);
        } else {
          tq::fuzz::remove_scratch("tok/tokenizer_config.json");
        }
        const auto tok = tq::Tokenizer::from_hf_dir(tq::fuzz::scratch_dir() + "/tok");
        std::vector<tq::TokenId> ids;
        for (int id = 0; id < tok->vocab_size() && id < 64; ++id) ids.push_back(id);
        (void)tok->decode(ids, true);
        try {
          const auto enc = tok->encode_prompt("Hello <|endoftext|> w\xC3\xB6rld \xFF!", true);
          for (tq::TokenId id : enc)
            if (id < 0 || id >= tok->vocab_size()) tq::fuzz::invariant_failed("encode returned an id outside the vocabulary");
        } catch (const tq::Error&) {  // the pre-tokenizer's regex may fail to compile or hit PCRE2 limits
        }
        break;
      }
    }
  } catch (const tq::Error&) {
  }
  return 0;
}
