// Turns a conversation into prompt ids with the model's own chat template.
#pragma once
#include <nlohmann/json.hpp>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tq {

class ChatTemplate;

// A model's chat template, parsed once and rendered for every conversation (const and
// thread-safe, cheap to copy). A template that does not parse keeps its error, which every ids()
// call throws, so such a model still serves plain prompts.
class ChatPrompt {
 public:
  ChatPrompt() = default;  // a model without a chat template
  explicit ChatPrompt(std::string chat_template);

  bool has_template() const { return !source_.empty(); }
  const std::string& source() const { return source_; }
  // Throws the template's parse error (tq::Error), if it has one: a template given at start-up is
  // checked then rather than on the first request.
  void check_parsed() const {
    if (parse_error_) std::rethrow_exception(parse_error_);
  }

  // messages: [{"role", "content"}, ...]; extra: template variables such as enable_thinking.
  // The rendered text is tokenized with special tokens parsed and no BOS added (the template
  // writes it when the model wants one), as transformers' apply_chat_template does.
  // Throws tq::Error when the model has no chat template or the template fails.
  std::vector<TokenId> ids(const Tokenizer& tokenizer, const nlohmann::json& messages, bool add_generation_prompt,
                           const nlohmann::json& extra, std::string* rendered = nullptr) const;

 private:
  std::string source_;
  std::shared_ptr<const ChatTemplate> parsed_;  // null when source_ is empty or did not parse
  std::exception_ptr parse_error_;              // why source_ did not parse
};

}  // namespace tq
