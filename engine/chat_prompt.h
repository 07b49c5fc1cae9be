// Turns a conversation into prompt ids with the model's own chat template.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tq {

// messages: [{"role", "content"}, ...]; extra: template variables such as enable_thinking.
// The rendered text is tokenized with special tokens parsed and no BOS added (the template
// writes it when the model wants one), as transformers' apply_chat_template does.
// Throws tq::Error when the model has no chat template or the template fails.
std::vector<TokenId> chat_prompt_ids(const Tokenizer& tokenizer, const std::string& chat_template,
                                     const nlohmann::json& messages, bool add_generation_prompt,
                                     const nlohmann::json& extra, std::string* rendered = nullptr);

}  // namespace tq
