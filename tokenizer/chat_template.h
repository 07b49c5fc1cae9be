// Renders a model's Jinja chat template (our own small Jinja interpreter: no C++ Jinja library
// is packaged). Output is byte-identical to Python jinja2 for the templates we test; a template
// that uses a feature we do not implement throws tq::Error naming the feature and the line.
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace tq {

struct ChatTemplateInputs {
  nlohmann::json messages = nlohmann::json::array();  // [{"role":..., "content":...}, ...]
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // Extra variables visible to the template (e.g. {"enable_thinking": false}, "tools": [...]).
  nlohmann::json extra = nlohmann::json::object();
};

std::string render_chat_template(const std::string& template_source, const ChatTemplateInputs& inputs);

}  // namespace tq
