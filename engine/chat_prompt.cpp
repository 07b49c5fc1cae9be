#include "engine/chat_prompt.h"

#include "errors/error.h"
#include "jinja/chat_template.h"

namespace tq {

std::vector<TokenId> chat_prompt_ids(const Tokenizer& tokenizer, const std::string& chat_template,
                                     const nlohmann::json& messages, bool add_generation_prompt,
                                     const nlohmann::json& extra, std::string* rendered) {
  if (chat_template.empty()) fail("this model has no chat template: give a plain prompt instead of a conversation");
  ChatTemplateInputs in;
  in.messages = messages;
  in.add_generation_prompt = add_generation_prompt;
  const SpecialTokens& s = tokenizer.special();
  if (s.bos) in.bos_token = tokenizer.token_text(*s.bos);
  if (s.eos) in.eos_token = tokenizer.token_text(*s.eos);
  if (extra.is_object()) in.extra = extra;
  const std::string text = render_chat_template(chat_template, in);
  if (rendered) *rendered = text;
  return tokenizer.encode(text, /*parse_special=*/true);
}

}  // namespace tq
