#include "server/openai_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>

#include "engine/chat_prompt.h"
#include "errors/error.h"
#include "model/token_ids.h"
#include "server/output_constraint_request.h"
#include "server/tool_calls.h"

namespace tq {

using nlohmann::json;

json ApiError::to_json() const {
  json e = {{"message", what()}, {"type", type}, {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(status) : json(code)}};
  return {{"error", e}};
}

ApiError bad_request(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", message, param);
}

namespace {

const char* type_name(const json& v) { return v.type_name(); }

double number_field(const json& body, const char* key, double fallback, double lo, double hi) {
  if (!present(body, key)) return fallback;
  const json& v = body[key];
  if (!v.is_number()) throw bad_request(fmt::format("'{}' must be a number, not {}", key, type_name(v)), key);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi)) throw bad_request(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, x), key);
  return x;
}

int64_t int_field(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  if (!present(body, key)) return fallback;
  const json& v = body[key];
  if (!v.is_number_integer())
    throw bad_request(fmt::format("'{}' must be an integer, not {}", key, v.is_number() ? "a fraction" : type_name(v)), key);
  // Compare as double so that huge unsigned values do not wrap.
  const double x = v.get<double>();
  if (x < double(lo) || x > double(hi))
    throw bad_request(fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v.dump()), key);
  return v.get<int64_t>();
}

bool bool_field(const json& body, const char* key, bool fallback) {
  if (!present(body, key)) return fallback;
  if (!body[key].is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean, not {}", key, type_name(body[key])), key);
  return body[key].get<bool>();
}

void check_model(const json& body, const ServedModel& m) {
  if (!present(body, "model")) return;
  if (!body["model"].is_string()) throw bad_request("'model' must be a string", "model");
  const std::string name = body["model"].get<std::string>();
  if (name != m.name)
    throw ApiError(404, "not_found_error", fmt::format("The model `{}` does not exist. This server serves `{}`.", name, m.name),
                   "model", "model_not_found");
}

void check_token_ids(const std::vector<TokenId>& ids, const ServedModel& m, const char* param) {
  for (TokenId id : ids)
    if (!token_id_in_vocab(id, m.vocab_size)) throw bad_request(token_id_outside_vocab("token id", id, m.vocab_size), param);
}

// OpenAI fields tqserve does not implement: refused by name rather than silently ignored
// (a client asking for functions must not get free text back as if it had worked).
// Neutral values (empty lists, "none"/"auto") pass.
void reject_unsupported(const json& body, bool chat, int n) {
  const auto unsupported = [](const char* key, const std::string& why) {
    return bad_request(fmt::format("'{}' is not supported by this server{}", key, why), key);
  };
  const auto non_empty = [&](const char* key) {
    if (!present(body, key)) return false;
    const json& v = body[key];
    return !((v.is_array() || v.is_object()) && v.empty());
  };
  const auto choice_is_neutral = [&](const char* key) {
    return !present(body, key) || (body[key].is_string() && (body[key] == "none" || body[key] == "auto"));
  };
  if (chat) {
    if (non_empty("functions")) throw unsupported("functions", " (the deprecated form: send 'tools')");
    if (!choice_is_neutral("function_call")) throw unsupported("function_call", " (the deprecated form: send 'tool_choice')");
  } else {
    if (present(body, "suffix") && !(body["suffix"].is_string() && body["suffix"].get<std::string>().empty()))
      throw unsupported("suffix", "");
    if (present(body, "best_of")) {
      const json& b = body["best_of"];
      if (!b.is_number_integer() || b.get<int64_t>() < n)
        throw bad_request(fmt::format("'best_of' must be an integer at least 'n' ({})", n), "best_of");
    }
  }
}

// Fields both endpoints share. max_tokens is resolved later, per prompt.
void parse_common(const json& body, std::string_view raw_body, const ServedModel& m, const RequestLimits& limits,
                  ApiRequest& r) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  check_model(body, m);
  SamplingParams& p = r.params;
  p.temperature = float(number_field(body, "temperature", 1.0, 0.0, 2.0));
  p.top_p = float(number_field(body, "top_p", 1.0, 0.0, 1.0));
  if (p.top_p <= 0.0f) throw bad_request("'top_p' must be greater than 0", "top_p");
  p.top_k = int(int_field(body, "top_k", 0, -1, 1 << 30));
  p.min_p = float(number_field(body, "min_p", 0.0, 0.0, 1.0));
  p.presence_penalty = float(number_field(body, "presence_penalty", 0.0, -2.0, 2.0));
  p.frequency_penalty = float(number_field(body, "frequency_penalty", 0.0, -2.0, 2.0));
  p.repetition_penalty = float(number_field(body, "repetition_penalty", 1.0, 1e-6, 10.0));
  if (present(body, "seed")) p.seed = uint64_t(int_field(body, "seed", 0, INT64_MIN, INT64_MAX));
  p.ignore_eos = bool_field(body, "ignore_eos", false);
  if (present(body, "stop")) {
    const json& s = body["stop"];
    if (s.is_string()) {
      p.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& e : s) {
        if (!e.is_string()) throw bad_request("'stop' must be a string or a list of strings", "stop");
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      throw bad_request("'stop' must be a string or a list of strings", "stop");
    }
    if (int(p.stop.size()) > limits.max_stop)
      throw bad_request(fmt::format("'stop' has {} strings, at most {} are allowed", p.stop.size(), limits.max_stop), "stop");
    for (const std::string& s : p.stop) {
      if (s.empty()) throw bad_request("'stop' strings must not be empty", "stop");
      if (int64_t(s.size()) > limits.max_stop_bytes)
        throw bad_request(fmt::format("a 'stop' string has {} bytes, at most {} are allowed", s.size(), limits.max_stop_bytes),
                          "stop");
    }
  }
  if (present(body, "stop_token_ids")) {
    const json& s = body["stop_token_ids"];
    if (!s.is_array()) throw bad_request("'stop_token_ids' must be a list of token ids", "stop_token_ids");
    for (const json& e : s) {
      if (!e.is_number_integer()) throw bad_request("'stop_token_ids' must be a list of token ids", "stop_token_ids");
      // Range-check before narrowing: 2^40 must not wrap to a valid id.
      const double v = e.get<double>();
      if (v < 0 || v >= m.vocab_size)
        throw bad_request(token_id_outside_vocab("token id", e.dump(), m.vocab_size), "stop_token_ids");
      p.stop_token_ids.push_back(e.get<int32_t>());
    }
    check_token_ids(p.stop_token_ids, m, "stop_token_ids");
  }
  r.n = int(int_field(body, "n", 1, 1, limits.max_n));
  r.stream = bool_field(body, "stream", false);
  reject_unsupported(body, r.chat, r.n);
  if (!r.chat && present(body, "best_of")) {
    r.best_of = int(int_field(body, "best_of", r.n, r.n, limits.max_n));
    if (r.best_of > r.n && r.stream)
      throw bad_request("'best_of' greater than 'n' cannot be streamed (the best are known only at the end)", "best_of");
  }
  if (present(body, "logit_bias")) {
    const json& lb = body["logit_bias"];
    if (!lb.is_object()) throw bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
    for (const auto& [key, value] : lb.items()) {
      char* end = nullptr;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != 0 || id < 0 || id >= m.vocab_size)
        throw bad_request(fmt::format("'logit_bias' key '{}' is not a token id of this model (0..{})", key, m.vocab_size - 1),
                          "logit_bias");
      if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0))
        throw bad_request(fmt::format("'logit_bias' value for token {} must be a number in [-100, 100], got {}", key,
                                      value.dump()),
                          "logit_bias");
      p.logit_bias.emplace_back(int32_t(id), float(value.get<double>()));
    }
  }
  if (auto spec = parse_output_constraint(body, raw_body)) {
    if (!m.structured_output)
      throw bad_request("structured output needs the model's tokenizer, which this server was started without", spec->field);
    try {
      p.constraint = m.structured_output->compile(*spec);
    } catch (const Error& e) {
      throw bad_request(e.what(), spec->field);
    }
  }
  if (present(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
    if (!r.stream) throw bad_request("'stream_options' is only allowed with 'stream': true", "stream_options");
    r.include_usage = bool_field(so, "include_usage", false);
  }
  try {
    SamplingParams check = p;
    check.max_tokens = 1;
    check.validate();
  } catch (const Error& e) {
    throw bad_request(e.what());
  }
}

// max_tokens against the context: an explicit value must fit with the prompt (vLLM's check);
// the default is `fallback`, capped to what is left.
void resolve_max_tokens(const json& body, const ServedModel& m, const RequestLimits& limits,
                        const std::vector<TokenId>& prompt, int fallback, bool allow_zero, ApiRequest& r) {
  const int prompt_len = static_cast<int>(prompt.size());
  if (prompt_len >= m.max_model_len)
    throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} tokens, "
                                  "which leaves no room for a completion.",
                                  m.max_model_len, prompt_len),
                      "prompt");
  const char* key = present(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (present(body, key)) {
    const int64_t requested = int_field(body, key, 0, allow_zero ? 0 : 1, INT32_MAX);
    if (limits.max_tokens > 0 && requested > limits.max_tokens)
      throw bad_request(fmt::format("'{}' is {}, but this server allows at most {} tokens per completion (--max-tokens-limit)",
                                    key, requested, limits.max_tokens),
                        key);
    if (requested + prompt_len > m.max_model_len)
      throw bad_request(fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens "
                                    "({} in the prompt, {} in the completion).",
                                    m.max_model_len, requested + prompt_len, prompt_len, requested),
                        key);
    r.max_tokens_zero = requested == 0;
    r.params.max_tokens = std::max<int>(1, int(requested));
  } else {
    r.params.max_tokens = std::min(fallback, m.max_model_len - prompt_len);
    if (limits.max_tokens > 0) r.params.max_tokens = std::min(r.params.max_tokens, limits.max_tokens);
  }
}

std::vector<TokenId> ids_from_json(const json& a, const ServedModel& m) {
  std::vector<TokenId> ids;
  for (const json& e : a) {
    if (!e.is_number_integer()) throw bad_request("'prompt' token lists must hold integers", "prompt");
    const int64_t v = e.get<int64_t>();
    if (!token_id_in_vocab(v, m.vocab_size)) throw bad_request(token_id_outside_vocab("token id", v, m.vocab_size), "prompt");
    ids.push_back(static_cast<TokenId>(v));
  }
  return ids;
}

}  // namespace

ApiRequest parse_completion_request(const json& body, const ServedModel& m, const RequestLimits& limits,
                                    std::string_view raw_body) {
  ApiRequest r;
  parse_common(body, raw_body, m, limits, r);
  r.echo = bool_field(body, "echo", false);
  if (present(body, "logprobs")) r.logprobs = int(int_field(body, "logprobs", 0, 0, limits.max_logprobs));
  if (!present(body, "prompt")) throw bad_request("'prompt' is required", "prompt");
  const json& p = body["prompt"];
  const auto encode = [&](const std::string& text) { return m.tokenizer->encode_prompt(text, true); };
  if (p.is_string()) {
    r.prompts.push_back(encode(p.get<std::string>()));
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    r.prompts.push_back(ids_from_json(p, m));
  } else if (p.is_array() && !p.empty()) {
    for (const json& e : p) {
      if (e.is_string()) {
        r.prompts.push_back(encode(e.get<std::string>()));
      } else if (e.is_array()) {
        r.prompts.push_back(ids_from_json(e, m));
      } else {
        throw bad_request("'prompt' must be a string, a list of token ids, or a list of either", "prompt");
      }
    }
  } else {
    throw bad_request("'prompt' must be a string, a list of token ids, or a list of either", "prompt");
  }
  if (int(r.prompts.size()) > limits.max_prompts)
    throw bad_request(fmt::format("{} prompts in one request, at most {}", r.prompts.size(), limits.max_prompts), "prompt");
  for (const auto& ids : r.prompts) {
    if (ids.empty()) throw bad_request("the prompt is empty: give at least one token", "prompt");
    resolve_max_tokens(body, m, limits, ids, 16, r.echo, r);
  }
  return r;
}

ApiRequest parse_chat_request(const json& body, const ServedModel& m, const RequestLimits& limits,
                              std::string_view raw_body) {
  ApiRequest r;
  r.chat = true;
  parse_common(body, raw_body, m, limits, r);
  if (bool_field(body, "logprobs", false)) r.logprobs = int(int_field(body, "top_logprobs", 0, 0, limits.max_logprobs));
  else if (present(body, "top_logprobs")) throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  if (!present(body, "messages")) throw bad_request("'messages' is required", "messages");
  const json& msgs = body["messages"];
  if (!msgs.is_array() || msgs.empty()) throw bad_request("'messages' must be a non-empty list", "messages");
  json normalized = json::array();
  static const char* const kRoles[] = {"system", "developer", "user", "assistant", "tool"};
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& msg = msgs[i];
    if (!msg.is_object())
      throw bad_request(fmt::format("messages[{}] must be an object with 'role' and 'content', not {}", i, msg.type_name()),
                        "messages");
    if (!msg.contains("role") || !msg["role"].is_string())
      throw bad_request(fmt::format("messages[{}] needs a string 'role'", i), "messages");
    const std::string role = msg["role"].get<std::string>();
    if (std::find(std::begin(kRoles), std::end(kRoles), role) == std::end(kRoles))
      throw bad_request(fmt::format("messages[{}] has role '{}'; expected one of system, developer, user, assistant, tool",
                                    i, role),
                        "messages");
    if (!present(msg, "content") && role != "assistant")
      throw bad_request(fmt::format("messages[{}] (role '{}') has no 'content'", i, role), "messages");
    json out = msg;
    if (!present(msg, "content")) out["content"] = "";  // an assistant turn with no text
    if (msg.contains("content") && msg["content"].is_array()) {
      // Content parts: the text parts, joined.
      std::string text;
      for (const json& part : msg["content"]) {
        // Type-check before comparing: a part {"type": 1} is a bad request, not a JSON type_error.
        const bool text_part = part.is_object() && part.contains("type") && part["type"].is_string() &&
                               part["type"] == "text" && part.contains("text") && part["text"].is_string();
        if (!text_part)
          throw bad_request(fmt::format("messages[{}]: only text content parts are supported (type 'text' with a "
                                        "string 'text')",
                                        i),
                            "messages");
        text += part["text"].get<std::string>();
      }
      out["content"] = text;
    } else if (msg.contains("content") && !msg["content"].is_string() && !msg["content"].is_null()) {
      throw bad_request(fmt::format("messages[{}] 'content' must be a string or a list of text parts, not {}", i,
                                    msg["content"].type_name()),
                        "messages");
    }
    normalized.push_back(out);
  }
  if (!m.chat_prompt.has_template()) throw bad_request("this model has no chat template: use /v1/completions", "messages");
  json extra = json::object();
  if (present(body, "chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object())
      throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    extra = body["chat_template_kwargs"];
  }
  const ToolsRequest tools = parse_tools(body, raw_body);
  if (tools.active()) {
    r.tool_calls = true;
    if (m.chat_prompt.source().find("tools") != std::string::npos) {
      extra["tools"] = tools.tools;  // the template renders them, and earlier turns' tool_calls
    } else {
      // The template knows nothing of tools: describe them in the system message and write earlier
      // calls as the model would have.
      for (json& msg : normalized)
        if (msg["role"] == "assistant" && msg.contains("tool_calls")) {
          const std::string calls = tool_calls_as_text(msg["tool_calls"]);
          std::string text = msg["content"].is_string() ? msg["content"].get<std::string>() : "";
          msg["content"] = text.empty() ? calls : text + "\n" + calls;
          msg.erase("tool_calls");
        }
      const std::string prompt = tools_system_prompt(tools.tools);
      if (normalized[0]["role"] == "system" && normalized[0]["content"].is_string())
        normalized[0]["content"] = normalized[0]["content"].get<std::string>() + "\n\n" + prompt;
      else
        normalized.insert(normalized.begin(), json{{"role", "system"}, {"content", prompt}});
    }
    if (tools.choice == ToolsRequest::Choice::required || tools.choice == ToolsRequest::Choice::named) {
      if (r.params.constraint)
        throw bad_request("'tool_choice' asks for a tool call and another field constrains the output: give one",
                          "tool_choice");
      const OutputConstraintSpec spec = tool_call_constraint(tools, tool_call_syntax(m.chat_prompt.source()));
      if (!m.structured_output)
        throw bad_request("a required tool call needs the model's tokenizer, which this server was started without",
                          "tool_choice");
      try {
        r.params.constraint = m.structured_output->compile(spec);
      } catch (const Error& e) {
        throw bad_request(e.what(), "tools");
      }
    }
  }
  try {
    r.prompts.push_back(m.chat_prompt.ids(*m.tokenizer, normalized, true, extra));
  } catch (const Error& e) {
    throw bad_request(std::string("the chat template failed: ") + e.what(), "messages");
  }
  if (r.prompts[0].empty()) throw bad_request("the conversation renders to an empty prompt", "messages");
  resolve_max_tokens(body, m, limits, r.prompts[0], m.max_model_len, false, r);
  return r;
}

}  // namespace tq
