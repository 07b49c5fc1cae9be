// engine/chat_prompt.h: a model's chat template is parsed once; each conversation renders what
// the template renders, and a template that does not parse fails every conversation with its
// parse error (the model still serves plain prompts).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "engine/chat_prompt.h"
#include "errors/error.h"
#include "jinja/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tq {
namespace {

const std::string kTinyQwen3 = std::string(TQ_SOURCE_DIR) + "/tests/data/tiny/qwen3-f32";
const std::string kImTemplate =
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}{{ greeting }}";

TEST(ChatPrompt, RendersWhatTheTemplateRendersAndParsesSpecialTokens) {
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_hf_dir(kTinyQwen3);
  const nlohmann::json messages = {{{"role", "user"}, {"content", "hello"}}};
  const nlohmann::json extra = {{"greeting", "hi"}};
  const ChatPrompt prompt(kImTemplate);
  ASSERT_TRUE(prompt.has_template());
  EXPECT_EQ(prompt.source(), kImTemplate);

  std::string rendered;
  const std::vector<TokenId> ids = prompt.ids(*tokenizer, messages, true, extra, &rendered);
  ChatTemplateInputs in;
  in.messages = messages;
  in.extra = extra;
  const SpecialTokens& s = tokenizer->special();
  if (s.bos) in.bos_token = tokenizer->token_text(*s.bos);
  if (s.eos) in.eos_token = tokenizer->token_text(*s.eos);
  EXPECT_EQ(rendered, ChatTemplate(kImTemplate).render(in));
  EXPECT_EQ(ids, tokenizer->encode(rendered, /*parse_special=*/true));
  EXPECT_EQ(prompt.ids(*tokenizer, messages, true, extra), ids);  // the same parse again
}

TEST(ChatPrompt, ATemplateThatDoesNotParseFailsEachConversationWithItsParseError) {
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::from_hf_dir(kTinyQwen3);
  const nlohmann::json messages = {{{"role", "user"}, {"content", "hello"}}};
  const std::string unclosed = "{% for m in messages %}{{ m['content'] }}";
  std::string parse_error;
  try {
    ChatTemplate{unclosed};
  } catch (const Error& e) {
    parse_error = e.what();
  }
  ASSERT_FALSE(parse_error.empty());

  const ChatPrompt prompt(unclosed);
  EXPECT_TRUE(prompt.has_template());
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      prompt.ids(*tokenizer, messages, true, nlohmann::json::object());
      FAIL() << "expected the parse error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), parse_error);
    }
  }
  try {
    ChatPrompt().ids(*tokenizer, messages, true, nlohmann::json::object());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("this model has no chat template"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tq
