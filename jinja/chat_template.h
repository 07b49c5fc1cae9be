// Renders a model's Jinja chat template (our own small Jinja interpreter: no C++ Jinja library
// is packaged). Output is byte-identical to Python jinja2 for the templates we test; a template
// that uses a feature we do not implement throws tq::Error naming the feature and the line.
//
// The template sees what HF transformers' apply_chat_template passes: messages, tools (None
// unless given), documents (None unless given), add_generation_prompt, bos_token, eos_token,
// plus `extra` (e.g. enable_thinking, tools, date_string), which overrides any of them.
// strftime_now() reads the clock; set TQ_FIXED_DATE=YYYY-MM-DD to pin it (see globals.cpp).
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "jinja/template.h"

namespace tq {

template <typename Json>
struct BasicChatTemplateInputs {
  Json messages = Json::array();  // [{"role":..., "content":...}, ...]
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // Extra variables visible to the template (e.g. {"enable_thinking": false}, "tools": [...]).
  Json extra = Json::object();
};

using ChatTemplateInputs = BasicChatTemplateInputs<nlohmann::json>;
// Keeps the caller's key order in objects, as Python dicts do: HF prints tool schemas with
// tojson in their given order, so requests carrying tools should be parsed into ordered_json.
// (nlohmann::json sorts keys, which changes such output.)
using OrderedChatTemplateInputs = BasicChatTemplateInputs<nlohmann::ordered_json>;

std::string render_chat_template(const std::string& template_source, const ChatTemplateInputs& inputs);
std::string render_chat_template(const std::string& template_source, const OrderedChatTemplateInputs& inputs);

// A chat template parsed once, for rendering every request (render is const and thread-safe).
class ChatTemplate {
 public:
  explicit ChatTemplate(const std::string& template_source);  // throws tq::Error on syntax errors
  std::string render(const ChatTemplateInputs& inputs) const;
  std::string render(const OrderedChatTemplateInputs& inputs) const;

 private:
  jinja::Template template_;
};

}  // namespace tq
