// The OpenAI request schema: a JSON body of /v1/completions or /v1/chat/completions becomes the
// prompts and sampling parameters the engine runs, or an ApiError naming the bad field.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "engine/chat_prompt.h"
#include "engine/sampler.h"
#include "engine/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace tq {

// An error in OpenAI's form: {"error": {"message", "type", "param", "code"}} with an HTTP status.
struct ApiError : std::runtime_error {
  ApiError(int status_, std::string type_, std::string message, std::string param_ = "", std::string code_ = "")
      : std::runtime_error(message), status(status_), type(std::move(type_)), param(std::move(param_)),
        code(std::move(code_)) {}
  int status;
  std::string type;  // "invalid_request_error", "authentication_error", "not_found_error", ...
  std::string param;
  std::string code;  // OpenAI's error code ("model_not_found"); empty: the HTTP status
  nlohmann::json to_json() const;
};
// 400 invalid_request_error about `param`.
ApiError bad_request(const std::string& message, const std::string& param = "");

// The request body has `key`, and it is not null (OpenAI treats an explicit null as absent).
inline bool present(const nlohmann::json& body, const char* key) { return body.contains(key) && !body[key].is_null(); }

// What the server serves, as requests see it.
struct ServedModel {
  std::string name;  // the id in /v1/models and responses
  const Tokenizer* tokenizer = nullptr;
  ChatPrompt chat_prompt;  // the model's chat template, parsed once
  int max_model_len = 0;
  int vocab_size = 0;
  std::string path;  // the model file or folder, reported in /get_server_info
  // Compiles response_format / guided_* / grammar constraints (null without a tokenizer).
  std::shared_ptr<const StructuredOutputCompiler> structured_output;
};

// Limits a request must respect (flags of `tqserve serve`).
struct RequestLimits {
  int max_n = 16;          // choices per prompt
  int max_stop = 16;       // stop strings
  int max_prompts = 64;    // prompts in one completions request
  int max_logprobs = SamplingParams::kMaxLogprobs;
  int max_stop_bytes = 1024;  // bytes of one stop string
  int max_tokens = 0;         // completion tokens per request (0: only the context limits)
};

struct ApiRequest {
  bool chat = false;
  std::string model;
  std::vector<std::vector<TokenId>> prompts;  // [prompts] (chat: one)
  SamplingParams params;                      // max_tokens resolved against the context
  int n = 1;
  int best_of = 1;  // completions: candidates per prompt (>= n); the n with the highest log-probability are returned
  int candidates_per_prompt() const { return best_of > n ? best_of : n; }
  bool stream = false;
  bool include_usage = false;
  bool echo = false;        // completions: prompt text (and logprobs) before the completion
  bool max_tokens_zero = false;  // echo with max_tokens 0: the prompt only
  int logprobs = -1;        // -1 none; completions: top alternatives (0..20); chat: top_logprobs
  bool tool_calls = false;  // chat with tools: the answer's tool calls go to message.tool_calls
};

// Throw ApiError. `body` is the parsed JSON (an object is required); raw_body, when given, the
// body as sent (a JSON schema in it keeps its key order).
ApiRequest parse_completion_request(const nlohmann::json& body, const ServedModel& model, const RequestLimits& limits,
                                    std::string_view raw_body = {});
ApiRequest parse_chat_request(const nlohmann::json& body, const ServedModel& model, const RequestLimits& limits,
                              std::string_view raw_body = {});

}  // namespace tq
