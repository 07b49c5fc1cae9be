// Regression tests of the fuzzers in fuzz/ (scripts/fuzz.sh): inputs that once crashed are kept
// here inline as bytes, and the committed seed corpora (fuzz/corpus/) are replayed through the
// same entry points in the normal (and ASan) test build, each input either accepted or rejected
// with the error type production code catches.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "errors/error.h"
#include "io/gguf.h"
#include "model/config.h"
#include "model/loader.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tq {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> corpus(const std::string& target) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(TQ_SOURCE_DIR) / "fuzz" / "corpus" / target))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A served model for the request parser: the stories260K tokenizer (512 tokens) and a minimal
// chat template.
struct RequestFixture {
  std::unique_ptr<Tokenizer> tokenizer;
  ServedModel model;
  RequestLimits limits;
  RequestFixture() {
    const GgufFile gguf = GgufFile::open(std::string(TQ_TESTDATA_DIR) + "/stories260K/stories260K.gguf");
    tokenizer = Tokenizer::from_gguf(gguf);
    model.name = "fuzz-model";
    model.tokenizer = tokenizer.get();
    model.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}";
    model.max_model_len = 256;
    model.vocab_size = tokenizer->vocab_size();
  }
};

TEST(FuzzRegressions, GgufSeedsLoadOrFailWithTqError) {
  const std::vector<fs::path> files = corpus("gguf");
  ASSERT_FALSE(files.empty());
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    const bool must_load = file.filename().string().rfind("tiny_", 0) == 0;  // complete tiny models
    try {
      LoadOptions options;
      const LoadedModel m = load_model(file.string(), options);
      ASSERT_TRUE(m.tokenizer);
      EXPECT_FALSE(m.tokenizer->encode_prompt("Hello world", true).empty());
      EXPECT_FALSE(m.chat_template.empty());
    } catch (const Error& e) {
      EXPECT_FALSE(must_load) << e.what();
    }
  }
}

TEST(FuzzRegressions, RequestSeedsParseOrFailWithApiError) {
  const RequestFixture f;
  const std::vector<fs::path> files = corpus("request");
  ASSERT_FALSE(files.empty());
  int accepted = 0;
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    const nlohmann::json body = nlohmann::json::parse(read_bytes(file), nullptr, false);
    ASSERT_TRUE(body.is_object());
    for (const bool chat : {false, true}) {
      try {
        const ApiRequest r = chat ? parse_chat_request(body, f.model, f.limits) : parse_completion_request(body, f.model, f.limits);
        EXPECT_FALSE(r.prompts.empty());
        ++accepted;
      } catch (const ApiError& e) {
        EXPECT_GE(e.status, 400);
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(FuzzRegressions, ChatTemplateSeedsRenderOrFailWithTqError) {
  for (const fs::path& file : corpus("chat_template")) {
    const std::string bytes = read_bytes(file);
    if (bytes.empty() || bytes[0] % 2 != 0) continue;  // the fuzzed-template seeds
    SCOPED_TRACE(file.string());
    const std::string rest = bytes.substr(1);
    const size_t nul = rest.find('\0');
    ChatTemplateInputs in;
    in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hello there"}])");
    if (nul != std::string::npos) {
      const nlohmann::json ctx = nlohmann::json::parse(rest.substr(nul + 1));
      if (ctx.contains("messages")) in.messages = ctx["messages"];
    }
    try {
      EXPECT_FALSE(ChatTemplate(rest.substr(0, nul)).render(in).empty());
    } catch (const Error& e) {
      SUCCEED() << e.what();
    }
  }
}

// fuzz_chat_template, session 6: a chain of joins of a string (each join multiplies its length by
// the separator's) grew past the fuzzer's 2.5 GB limit. join's result is now bounded: the chain
// fails with a MemoryError instead, and ordinary joins are unchanged.
TEST(FuzzRegressions, ChainedJoinsFailWithAMemoryError) {
  ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  // Six joins by 16-character separators: 280 characters would become about 280 · 17^6 bytes.
  const std::string sep = "'" + std::string(16, '#') + "'";
  std::string chain = "{{ ('a,b' * 40)";
  for (int i = 0; i < 6; ++i) chain += " | join(" + sep + ")";
  chain += " }}";
  try {
    ChatTemplate(chain).render(in);
    FAIL() << "the chain of joins rendered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("MemoryError"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ChatTemplate("{{ 'abc' | join('-') }}|{{ ['x', 'y'] | join(', ') }}").render(in), "a-b-c|x, y");
}

}  // namespace
}  // namespace tq
