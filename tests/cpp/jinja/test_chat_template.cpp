// Golden tests: real chat templates (Qwen3, Qwen2.5, Llama 3.2, SmolLM2) rendered by our Jinja
// interpreter must match Python jinja2 + HF transformers byte for byte. The expectations in
// tests/data/chat_templates/golden.json come from tools/gen_chat_template_golden.py.
#include <gtest/gtest.h>

#include "support/testdata_support.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "errors/error.h"
#include "jinja/chat_template.h"

namespace tq {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("cannot open " + path);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

const nlohmann::ordered_json& golden() {
  // ordered_json keeps the tool schemas' key order, which tojson prints.
  static const nlohmann::ordered_json data =
      nlohmann::ordered_json::parse(read_file(std::string(TQ_SOURCE_DIR) + "/tests/data/chat_templates/golden.json"));
  return data;
}

std::string template_source(const std::string& name) {
  const auto& location = golden().at("templates").at(name);
  std::string root = location.at("root") == "testdata" ? test::testdata_dir() : std::string(TQ_SOURCE_DIR);
  return read_file(root + "/" + location.at("path").get<std::string>());
}

OrderedChatTemplateInputs inputs_of(const nlohmann::ordered_json& test_case) {
  OrderedChatTemplateInputs inputs;
  inputs.messages = test_case.at("messages");
  inputs.add_generation_prompt = test_case.at("add_generation_prompt").get<bool>();
  inputs.bos_token = test_case.at("bos_token").get<std::string>();
  inputs.eos_token = test_case.at("eos_token").get<std::string>();
  inputs.extra = test_case.at("extra");
  return inputs;
}

// Pins strftime_now to the golden file's date for the duration of a test.
class ScopedFixedDate {
 public:
  explicit ScopedFixedDate(const std::string& value) {
    if (const char* previous = std::getenv("TQ_FIXED_DATE")) previous_ = previous;
    setenv("TQ_FIXED_DATE", value.c_str(), 1);
  }
  ~ScopedFixedDate() {
    if (previous_) {
      setenv("TQ_FIXED_DATE", previous_->c_str(), 1);
    } else {
      unsetenv("TQ_FIXED_DATE");
    }
  }

 private:
  std::optional<std::string> previous_;
};

TEST(ChatTemplateGolden, MatchesTransformersByteForByte) {
  TQ_REQUIRE_TESTDATA();
  ScopedFixedDate date(golden().at("fixed_date").get<std::string>());
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [name, location] : golden().at("templates").items()) templates.emplace(name, template_source(name));
  int rendered = 0, failed_as_expected = 0;
  for (const auto& test_case : golden().at("cases")) {
    std::string name = test_case.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const ChatTemplate& chat_template = templates.at(test_case.at("template").get<std::string>());
    OrderedChatTemplateInputs inputs = inputs_of(test_case);
    if (test_case.contains("expected")) {
      EXPECT_EQ(chat_template.render(inputs), test_case.at("expected").get<std::string>());
      ++rendered;
      continue;
    }
    std::string expected_error = test_case.at("expected_error").get<std::string>();
    try {
      chat_template.render(inputs);
      ADD_FAILURE() << "expected the template to raise: " << expected_error;
    } catch (const Error& error) {
      std::string message = error.what();
      EXPECT_NE(message.find(expected_error), std::string::npos) << message;
      EXPECT_EQ(message.rfind("chat template line ", 0), 0u) << message;
      ++failed_as_expected;
    }
  }
  EXPECT_GE(rendered, 90);
  EXPECT_GE(failed_as_expected, 2);
}

TEST(ChatTemplateGolden, UnorderedInputsMatchWhenNoObjectIsPrinted) {
  TQ_REQUIRE_TESTDATA();
  // nlohmann::json sorts object keys; that only shows where a template prints a whole object.
  ScopedFixedDate date(golden().at("fixed_date").get<std::string>());
  int compared = 0;
  for (const auto& test_case : golden().at("cases")) {
    if (!test_case.contains("expected") || !test_case.at("extra").empty()) continue;
    SCOPED_TRACE(test_case.at("name").get<std::string>());
    OrderedChatTemplateInputs ordered = inputs_of(test_case);
    ChatTemplateInputs inputs;
    inputs.messages = nlohmann::json::parse(ordered.messages.dump());
    inputs.add_generation_prompt = ordered.add_generation_prompt;
    inputs.bos_token = ordered.bos_token;
    inputs.eos_token = ordered.eos_token;
    std::string source = template_source(test_case.at("template").get<std::string>());
    EXPECT_EQ(render_chat_template(source, inputs), test_case.at("expected").get<std::string>());
    ++compared;
  }
  EXPECT_GE(compared, 60);
}

TEST(ChatTemplate, ContextHasTransformersVariables) {
  ChatTemplateInputs inputs;
  inputs.messages = nlohmann::json::array({{{"role", "user"}, {"content", "hi"}}});
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  inputs.add_generation_prompt = false;
  const char* source =
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools is defined }}|{{ tools }}|"
      "{{ documents }}|{{ messages[0].content }}|{{ enable_thinking is defined }}";
  EXPECT_EQ(render_chat_template(source, inputs), "<s>|</s>|False|True|None|None|hi|False");
  inputs.extra = {{"enable_thinking", false}, {"tools", nlohmann::json::array()}};
  EXPECT_EQ(render_chat_template("{{ enable_thinking }}|{{ tools }}", inputs), "False|[]");
}

TEST(ChatTemplate, RejectsMalformedInputs) {
  ChatTemplateInputs inputs;
  inputs.messages = nlohmann::json::object();
  EXPECT_THROW(render_chat_template("x", inputs), Error);
  inputs.messages = nlohmann::json::array();
  inputs.extra = nlohmann::json::array();
  EXPECT_THROW(render_chat_template("x", inputs), Error);
}

TEST(ChatTemplate, SmolLm2TemplateIsTheGgufOne) {
  // Extracted from SmolLM2-135M-Instruct's GGUF (tokenizer.chat_template) with the gguf package.
  std::string source = read_file(std::string(TQ_SOURCE_DIR) + "/tests/data/chat_templates/smollm2.jinja");
  EXPECT_EQ(source.rfind("{% for message in messages %}", 0), 0u);
  EXPECT_NE(source.find("You are a helpful AI assistant named SmolLM, trained by Hugging Face"), std::string::npos);
}

}  // namespace
}  // namespace tq
