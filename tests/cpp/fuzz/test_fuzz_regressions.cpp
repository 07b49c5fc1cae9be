// Regression tests of the fuzzers in fuzz/ (scripts/fuzz.sh): inputs that once crashed are kept
// here inline as bytes, and the committed seed corpora (fuzz/corpus/) are replayed through the
// same entry points in the normal (and ASan) test build, each input either accepted or rejected
// with the error type production code catches.
#include <gtest/gtest.h>

#include "support/testdata_support.h"

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
#include "jinja/chat_template.h"
#include "model/config.h"
#include "model/loader.h"
#include "server/openai_request.h"
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
    const GgufFile gguf = GgufFile::open(test::testdata("stories260K/stories260K.gguf"));
    tokenizer = Tokenizer::from_gguf(gguf);
    model.name = "fuzz-model";
    model.tokenizer = tokenizer.get();
    model.chat_prompt = ChatPrompt("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}");
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
  TQ_REQUIRE_TESTDATA();
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

// Renders `source` and expects a tq::Error whose message names `expected`.
void expect_render_error(const std::string& source, const std::string& expected) {
  ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  try {
    ChatTemplate(source).render(in);
    ADD_FAILURE() << source << " rendered";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << source << ": " << e.what();
  }
}

// fuzz_chat_template, session 9: a printf-style width of many nines ('%9999…9s' % x) overflowed the
// int it was parsed into (UBSan: signed integer overflow), and a width of 999999999 would have
// padded to a gigabyte. Widths past the int range fail as in Python ("width too big"); widths past
// kMaxFormatField fail with a MemoryError; ordinary ones, numeric ones wider than the old 512-byte
// buffer included, render as Python renders them.
TEST(FuzzRegressions, HugePrintfWidthsFailWithAClearError) {
  expect_render_error("{{ '%" + std::string(120, '9') + "s' % 'x' }}", "ValueError: width too big");
  expect_render_error("{{ '%.99999999999d' % 1 }}", "ValueError: precision too big");
  expect_render_error("{{ '%999999999s' % 'x' }}", "MemoryError");
  ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(ChatTemplate("[{{ '%5s|%-4d|%.2f|%x' % ('ab', 7, 3.14159, 255) }}]").render(in), "[   ab|7   |3.14|ff]");
  // Python: len('%600d' % 42) == 600 and ('%600d' % 42).endswith(' 42').
  const std::string wide = ChatTemplate("{{ '%600d' % 42 }}").render(in);
  EXPECT_EQ(wide.size(), 600u);
  EXPECT_EQ(wide.substr(597), " 42");
}

// A template that doubles a string or a list in a loop grows memory exponentially, as the chain of
// joins above did; concatenation, repetition and the rendered text are bounded the same way.
TEST(FuzzRegressions, DoublingInALoopFailsWithAMemoryError) {
  expect_render_error(
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
      "MemoryError");
  expect_render_error(
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
      "MemoryError");
  expect_render_error(
      "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | length }}",
      "MemoryError");
  expect_render_error("{{ [1, 2] * 3000000 }}", "MemoryError");
  expect_render_error("{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}", "MemoryError");
  // Widths and replacements that would build one huge string (Python raises MemoryError too).
  expect_render_error("{{ 'x'.ljust(1000000000000) }}", "MemoryError");
  expect_render_error("{{ 'x'.center(100000000, '\u00e9') }}", "MemoryError");
  expect_render_error("{{ '7'.zfill(1000000000000) }}", "MemoryError");
  expect_render_error("{{ 'a\nb' | indent(1000000000000) }}", "MemoryError");
  expect_render_error("{{ ('a' * 1000) | replace('a', 'b' * 100000) }}", "MemoryError");
  expect_render_error("{{ ('a' * 1000).replace('', 'b' * 100000) }}", "MemoryError");
  ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(ChatTemplate("{% set ns = namespace(s='ab') %}{% for i in range(3) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                         "{{ ns.s }}|{{ ([0] * 3 + [1]) | length }}")
                .render(in),
            "abababababababab|4");
  EXPECT_EQ(ChatTemplate("[{{ 'ab'.center(6, '*') }}|{{ '-7'.zfill(4) }}|{{ 'a\nb' | indent(2) }}|{{ 'aXa' | replace('a', 'bc') }}]")
                .render(in),
            "[**ab**|-007|a\n  b|bcXbc]");
}

}  // namespace
}  // namespace tq
