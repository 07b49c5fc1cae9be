// Fuzzes the OpenAI request schema: an HTTP body becomes request parameters through
// parse_completion_request / parse_chat_request, exactly as server/http_server.cpp does it
// (json::parse without exceptions, then an object check, then the parser). The server's
// handlers catch ApiError only (anything else is a 500 "internal error"), so that is all this
// harness catches. The model is SmolLM2 (find_default_model) when installed, else the Qwen2
// tokenizer of the test data, with its own chat template.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "errors/error.h"
#include "fuzz/fuzz_common.h"
#include "io/gguf.h"
#include "model/loader.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Served {
  std::unique_ptr<tq::Tokenizer> tokenizer;
  tq::ServedModel model;
  tq::RequestLimits limits;
};

const Served& served() {
  static const Served s = [] {
    Served out;
    try {
      tq::LoadOptions options;
      options.with_weights = false;
      tq::LoadedModel m = tq::load_model(tq::find_default_model(), options);
      out.tokenizer = std::move(m.tokenizer);
      out.model.chat_prompt = tq::ChatPrompt(m.chat_template);
      out.model.vocab_size = m.config.vocab_size;
    } catch (const tq::Error&) {
      const std::string dir = tq::fuzz::testdata("qwen2-tokenizer");
      out.tokenizer = tq::Tokenizer::from_hf_dir(dir);
      std::ifstream in(dir + "/tokenizer_config.json");
      out.model.chat_prompt = tq::ChatPrompt(nlohmann::json::parse(in).at("chat_template").get<std::string>());
      out.model.vocab_size = out.tokenizer->vocab_size();
    }
    out.model.name = "fuzz-model";
    out.model.tokenizer = out.tokenizer.get();
    out.model.max_model_len = 256;
    return out;
  }();
  return s;
}

void check(const tq::ApiRequest& r, const Served& s) {
  if (r.prompts.empty()) tq::fuzz::invariant_failed("accepted request without prompts");
  for (const auto& p : r.prompts) {
    if (p.empty()) tq::fuzz::invariant_failed("accepted an empty prompt");
    if (static_cast<int>(p.size()) >= s.model.max_model_len) tq::fuzz::invariant_failed("accepted a prompt that fills the context");
    for (tq::TokenId id : p)
      if (id < 0 || id >= s.model.vocab_size) tq::fuzz::invariant_failed("accepted a token id outside the vocabulary");
    if (r.params.max_tokens < 1) tq::fuzz::invariant_failed("max_tokens below 1");
    // One max_tokens serves every prompt of a request; the default is resolved against the last
    // prompt (the engine still stops each sequence at max_model_len), so only a single prompt
    // must fit exactly.
    if (r.prompts.size() == 1 && static_cast<int>(p.size()) + r.params.max_tokens > s.model.max_model_len)
      tq::fuzz::invariant_failed("max_tokens does not fit the context");
  }
  if (r.n < 1 || r.n > s.limits.max_n) tq::fuzz::invariant_failed("n outside its limits");
}

}  // namespace

// Loads the fixed inputs before fuzzing starts, outside libFuzzer's per-input timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)served();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Served& s = served();
  const std::string text(reinterpret_cast<const char*>(data), size);
  // http_server.cpp's parse_body: invalid JSON and non-objects are rejected before parsing.
  const nlohmann::json body = nlohmann::json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return 0;
  try {
    check(tq::parse_completion_request(body, s.model, s.limits), s);
  } catch (const tq::ApiError&) {
  }
  try {
    check(tq::parse_chat_request(body, s.model, s.limits), s);
  } catch (const tq::ApiError&) {
  }
  return 0;
}
