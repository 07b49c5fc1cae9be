#include "jinja/chat_template.h"

#include "errors/error.h"

namespace tq {
namespace {

template <typename Json>
nlohmann::ordered_json make_context(const BasicChatTemplateInputs<Json>& inputs) {
  if (!inputs.messages.is_array()) fail("chat template: messages must be a JSON array");
  if (!inputs.extra.is_object() && !inputs.extra.is_null()) fail("chat template: extra variables must be a JSON object");
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = inputs.messages;
  // transformers always passes tools and documents (None when absent), so `tools is defined`
  // holds even without tools.
  context["tools"] = nullptr;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  context["bos_token"] = inputs.bos_token;
  context["eos_token"] = inputs.eos_token;
  if (inputs.extra.is_object()) {
    for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it) context[it.key()] = it.value();
  }
  return context;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& template_source) : template_(template_source) {}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  return template_.render(make_context(inputs));
}

std::string ChatTemplate::render(const OrderedChatTemplateInputs& inputs) const {
  return template_.render(make_context(inputs));
}

std::string render_chat_template(const std::string& template_source, const ChatTemplateInputs& inputs) {
  return ChatTemplate(template_source).render(inputs);
}

std::string render_chat_template(const std::string& template_source, const OrderedChatTemplateInputs& inputs) {
  return ChatTemplate(template_source).render(inputs);
}

}  // namespace tq
