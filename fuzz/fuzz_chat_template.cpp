// Fuzzes the Jinja chat-template interpreter (jinja/*.cpp via chat_template.h).
//   byte 0 even: the rest is "<template source>[\0<context JSON>]": parse and render the
//                fuzzed template with fixed messages, or with the JSON's "messages"/"extra".
//   byte 0 odd:  the rest is a JSON context ({"messages": [...], "extra": {...},
//                "add_generation_prompt": bool} or just the messages array) rendered with one
//                of the real templates (Qwen3, Qwen2.5, Llama 3.2, SmolLM2), picked by byte 0.
// Production (parse_chat_request, cli chat) catches tq::Error from rendering and nothing else,
// so that is all this harness catches.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "errors/error.h"
#include "fuzz/fuzz_common.h"
#include "jinja/chat_template.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz_chat_template: cannot read %s\n", path.c_str());
    std::abort();
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<tq::ChatTemplate>& real_templates() {
  static const std::vector<tq::ChatTemplate> all = [] {
    ::setenv("TQ_FIXED_DATE", "2025-01-01", 1);  // strftime_now: deterministic runs
    std::vector<tq::ChatTemplate> out;
    for (const char* t : {"llama.cpp-vocab/templates/Qwen-Qwen3-0.6B.jinja",
                          "llama.cpp-vocab/templates/Qwen-Qwen2.5-7B-Instruct.jinja",
                          "llama.cpp-vocab/templates/meta-llama-Llama-3.2-3B-Instruct.jinja"})
      out.emplace_back(read_file(tq::fuzz::testdata(t)));
    out.emplace_back(read_file(std::string(TQ_FUZZ_SOURCE_DIR) + "/tests/data/chat_templates/smollm2.jinja"));
    return out;
  }();
  return all;
}

tq::ChatTemplateInputs default_inputs() {
  tq::ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi <think> there"},
    {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nHello!", "tool_calls": [
      {"type": "function", "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
    {"role": "tool", "content": "{\"ok\": 1}"},
    {"role": "user", "content": null}])");
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.extra = {{"tools", nlohmann::json::parse(R"([{"type": "function", "function": {"name": "f",
      "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}])")},
              {"enable_thinking", false}};
  return in;
}

// Applies a JSON context to the inputs; false when it is not usable JSON.
bool apply_context(std::string_view text, tq::ChatTemplateInputs& in) {
  nlohmann::json ctx = nlohmann::json::parse(text, nullptr, false);
  if (ctx.is_discarded()) return false;
  if (ctx.is_object()) {
    if (ctx.contains("messages")) in.messages = ctx["messages"];
    if (ctx.contains("extra")) in.extra = ctx["extra"];
    if (ctx.contains("add_generation_prompt") && ctx["add_generation_prompt"].is_boolean())
      in.add_generation_prompt = ctx["add_generation_prompt"].get<bool>();
  } else {
    in.messages = ctx;
  }
  return true;
}

}  // namespace

// Loads the fixed inputs before fuzzing starts, outside libFuzzer's per-input timeout.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)real_templates();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& templates = real_templates();
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  tq::ChatTemplateInputs in = default_inputs();
  try {
    if (data[0] % 2 == 0) {
      const size_t nul = rest.find('\0');
      const std::string source(rest.substr(0, nul));
      if (nul != std::string_view::npos && !apply_context(rest.substr(nul + 1), in)) return 0;
      const tq::ChatTemplate t(source);
      (void)t.render(in);
    } else {
      if (!apply_context(rest, in)) return 0;
      (void)templates[(data[0] / 2) % templates.size()].render(in);
    }
  } catch (const tq::Error&) {
  }
  return 0;
}
