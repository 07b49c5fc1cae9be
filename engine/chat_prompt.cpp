#include "engine/chat_prompt.h"

#include <utility>

#include "errors/error.h"
#include "jinja/chat_template.h"

namespace tq {

ChatPrompt::ChatPrompt(std::string chat_template) : source_(std::move(chat_template)) {
  if (source_.empty()) return;
  try {
    parsed_ = std::make_shared<const ChatTemplate>(source_);
  } catch (...) {
    parse_error_ = std::current_exception();
  }
}

std::vector<TokenId> ChatPrompt::ids(const Tokenizer& tokenizer, const nlohmann::json& messages,
                                     bool add_generation_prompt, const nlohmann::json& extra,
                                     std::string* rendered) const {
  if (!has_template()) fail("this model has no chat template: give a plain prompt instead of a conversation");
  if (parse_error_) std::rethrow_exception(parse_error_);
  ChatTemplateInputs in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  const SpecialTokens& s = tokenizer.special();
  if (s.bos) in.bos_token = tokenizer.token_text(*s.bos);
  if (s.eos) in.eos_token = tokenizer.token_text(*s.eos);
  if (extra.is_object()) in.extra = extra;
  const std::string text = parsed_->render(in);
  if (rendered) *rendered = text;
  return tokenizer.encode(text, /*parse_special=*/true);
}

}  // namespace tq
