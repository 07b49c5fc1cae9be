// Structured output (engine/structured_output.h) on a real tiny model (stories260K, a SentencePiece
// vocabulary with byte-fallback tokens): constrained requests' text matches the constraint (checked
// by std::regex and by nlohmann's JSON parser, not by xgrammar), finishes with "stop", and is the
// same alone, batched with free requests, chunked and preempted; bad constraints are refused with
// the field named.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <regex>
#include <thread>

#include "engine/engine_core.h"
#include "engine/structured_output.h"
#include "errors/error.h"
#include "model/loader.h"
#include "support/testdata_support.h"

namespace tq {
namespace {

struct Tiny {
  LoadedModel model = load_model(test::testdata("stories260K/stories260K.gguf"));
  Transformer transformer{model.config, model.weights};
  StructuredOutputCompiler compiler{*model.tokenizer, model.config.vocab_size, model.stop_ids};

  std::unique_ptr<KvCache> make_cache(int blocks) {
    const ModelConfig& c = model.config;
    return std::make_unique<KvCache>(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim, 16, KvDtype::F32, KvDtype::F32},
                                     blocks);
  }
};

Tiny& tiny() {
  static Tiny t;
  return t;
}

OutputConstraintSpec spec(OutputConstraintSpec::Kind kind, std::string text, std::vector<std::string> choices = {}) {
  OutputConstraintSpec s;
  s.kind = kind;
  s.text = std::move(text);
  s.choices = std::move(choices);
  s.field = "test_field";
  return s;
}

struct RunResult {
  std::string text;
  FinishReason finish = FinishReason::none;
};

std::map<uint64_t, RunResult> run_all(EngineCore& engine, std::vector<std::unique_ptr<Request>> requests) {
  std::map<uint64_t, RunResult> out;
  for (auto& r : requests) engine.add_request(std::move(r));
  for (int s = 0; s < 20000 && engine.has_work(); ++s)
    for (RequestOutput& o : engine.step()) {
      out[o.id].text += o.new_text;
      if (o.finish != FinishReason::none) out[o.id].finish = o.finish;
    }
  EXPECT_FALSE(engine.has_work());
  return out;
}

SamplingParams constrained(const OutputConstraintSpec& s, float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.max_tokens = 120;
  p.constraint = tiny().compiler.compile(s);
  return p;
}

EngineConfig config(int budget, int max_seqs) {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = max_seqs;
  return c;
}

const char* kRegex = "[a-z]{2,6}-[0-9]{3}( [A-Z][a-z]{1,8}){1,2}";
const char* kSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "age": {"type": "integer", "minimum": 0, "maximum": 99},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}},
  "required": ["name", "age", "pets"], "additionalProperties": false})";

TEST(StructuredOutput, ConstrainedTextMatchesAndFinishesWithStop) {
  TQ_REQUIRE_TESTDATA();
  auto cache = tiny().make_cache(64);
  EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, config(64, 8));
  const auto prompt = tiny().model.tokenizer->encode_prompt("Once upon a time", true);
  std::vector<std::unique_ptr<Request>> reqs;
  for (uint64_t i = 0; i < 4; ++i) {
    reqs.push_back(std::make_unique<Request>(i, prompt, constrained(spec(OutputConstraintSpec::Kind::regex, kRegex), 0.9f, i)));
    reqs.push_back(
        std::make_unique<Request>(10 + i, prompt, constrained(spec(OutputConstraintSpec::Kind::json_schema, kSchema), 0.9f, i)));
  }
  reqs.push_back(std::make_unique<Request>(
      20, prompt, constrained(spec(OutputConstraintSpec::Kind::choice, "", {"Lily", "Tim", "the big dog"}), 1.0f, 3)));
  const auto runs = run_all(engine, std::move(reqs));
  for (uint64_t i = 0; i < 4; ++i) {
    const RunResult& r = runs.at(i);
    EXPECT_EQ(r.finish, FinishReason::stop) << r.text;
    EXPECT_TRUE(std::regex_match(r.text, std::regex(kRegex))) << r.text;
    const RunResult& j = runs.at(10 + i);
    EXPECT_EQ(j.finish, FinishReason::stop) << j.text;
    const auto v = nlohmann::json::parse(j.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << j.text;
    ASSERT_TRUE(v.is_object() && v.size() == 3) << j.text;
    EXPECT_LE(v["name"].get<std::string>().size(), 12u);
    EXPECT_TRUE(v["age"].is_number_integer() && v["age"].get<int>() >= 0 && v["age"].get<int>() <= 99) << j.text;
    EXPECT_LE(v["pets"].size(), 2u);
    for (const auto& p : v["pets"]) EXPECT_TRUE(p == "cat" || p == "dog") << j.text;
  }
  const std::string choice = runs.at(20).text;
  EXPECT_TRUE(choice == "Lily" || choice == "Tim" || choice == "the big dog") << choice;
  EXPECT_EQ(engine.stats().blocks_in_use, 0);
}

TEST(StructuredOutput, OutputIsTheSameAloneBatchedChunkedAndPreempted) {
  TQ_REQUIRE_TESTDATA();
  const auto prompt = tiny().model.tokenizer->encode_prompt("Tom had a little", true);
  const auto schema = spec(OutputConstraintSpec::Kind::json_schema, kSchema);
  std::map<uint64_t, std::string> alone;
  for (uint64_t i = 0; i < 3; ++i) {
    auto cache = tiny().make_cache(64);
    EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, config(256, 1));
    std::vector<std::unique_ptr<Request>> one;
    one.push_back(std::make_unique<Request>(i, prompt, constrained(schema, 0.8f, 100 + i)));
    alone[i] = run_all(engine, std::move(one)).at(i).text;
  }
  // Batched with free-text requests, a token budget of 5 (chunked prefill beside decode) and a
  // cache small enough that requests are preempted and recomputed.
  auto cache = tiny().make_cache(12);
  EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, config(5, 8));
  std::vector<std::unique_ptr<Request>> reqs;
  for (uint64_t i = 0; i < 3; ++i) {
    reqs.push_back(std::make_unique<Request>(i, prompt, constrained(schema, 0.8f, 100 + i)));
    SamplingParams free_text;
    free_text.temperature = 0;
    free_text.max_tokens = 40;
    reqs.push_back(std::make_unique<Request>(50 + i, prompt, free_text));
  }
  const auto runs = run_all(engine, std::move(reqs));
  EXPECT_GT(engine.stats().preemptions, 0) << "the cache was meant to force preemption";
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(runs.at(i).text, alone[i]) << "request " << i;
  EXPECT_EQ(engine.stats().blocks_in_use, 0);
}

// xgrammar prints a codepoint below 0x100 as \xHH and, unpatched, read \x with any number of hex
// digits back: "é" followed by "a" became U+E9A, and a long run overflowed an int (found by
// fuzz_structured_output; scripts/xgrammar-0.2.9-escapes.patch). A single choice must come out
// byte for byte.
TEST(StructuredOutput, ASingleChoiceComesOutByteForByte) {
  TQ_REQUIRE_TESTDATA();
  for (const std::string choice : {"\xc3\xa9" "a", "na\xc3\xafve caf\xc3\xa9 deja", "x\x01" "cccccccccc", "tab\there \"q\" \\"}) {
    auto cache = tiny().make_cache(32);
    EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, config(64, 1));
    std::vector<std::unique_ptr<Request>> one;
    one.push_back(std::make_unique<Request>(
        1, tiny().model.tokenizer->encode_prompt("Once", true),
        constrained(spec(OutputConstraintSpec::Kind::choice, "", {choice}), 0.0f, 1)));
    const auto runs = run_all(engine, std::move(one));
    EXPECT_EQ(runs.at(1).text, choice);
    EXPECT_EQ(runs.at(1).finish, FinishReason::stop);
  }
  // A \U escape beyond Unicode is an error, not an overflow.
  EXPECT_THROW(tiny().compiler.compile(spec(OutputConstraintSpec::Kind::grammar, "root ::= \"\\UFFFFFFFF\"")), Error);
}

// A compile past the limit answers at the limit and finishes on its own thread; while too many
// are overdue, new constraints are refused; once they end, compiles work again.
TEST(StructuredOutput, SlowCompilesAreRefusedAtTheLimit) {
  TQ_REQUIRE_TESTDATA();
  StructuredOutputCompiler compiler(*tiny().model.tokenizer, tiny().model.config.vocab_size, tiny().model.stop_ids,
                                    std::chrono::milliseconds(1));
  const auto slow = [](int seed) {  // thousands of distinct choices: well over 1 ms to compile
    std::vector<std::string> choices;
    for (int i = 0; i < 4000; ++i) choices.push_back("choice " + std::to_string(seed) + " number " + std::to_string(i));
    return spec(OutputConstraintSpec::Kind::choice, "", choices);
  };
  const auto message = [&](const OutputConstraintSpec& s) {
    try {
      compiler.compile(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("compiled");
  };
  EXPECT_NE(message(slow(1)).find("'test_field' took longer than 1 ms to compile"), std::string::npos);
  EXPECT_NE(message(slow(2)).find("took longer than 1 ms"), std::string::npos);
  ASSERT_EQ(compiler.overdue_compiles(), StructuredOutputCompiler::kMaxOverdueCompiles);
  EXPECT_NE(message(slow(3)).find("2 earlier constraints are still compiling past the 1 ms limit"), std::string::npos);
  for (int i = 0; i < 600 && compiler.overdue_compiles() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(compiler.overdue_compiles(), 0);
  StructuredOutputCompiler patient(*tiny().model.tokenizer, tiny().model.config.vocab_size, tiny().model.stop_ids);
  EXPECT_NO_THROW(patient.compile(slow(1)));
}

// Distinct schemas, one after another, keep the compiled-grammar cache within its size (a server
// fed endless distinct schemas must not grow), counting the request text that keys each grammar;
// failed compiles are not kept; a repeated schema is served from the cache; size 0 keeps nothing.
TEST(StructuredOutput, TheCompiledGrammarCacheStaysWithinItsSize) {
  TQ_REQUIRE_TESTDATA();
  const auto distinct = [](int i, const std::string& description = "") {
    return spec(OutputConstraintSpec::Kind::json_schema,
                R"({"type":"object","description":")" + description + R"(","properties":{"field_)" + std::to_string(i) +
                    R"(":{"type":"string","maxLength":)" + std::to_string(i % 7 + 1) + R"(}},"required":["field_)" +
                    std::to_string(i) + R"("]})");
  };
  const int64_t limit = 256 << 10;
  StructuredOutputCompiler bounded(*tiny().model.tokenizer, tiny().model.config.vocab_size, tiny().model.stop_ids,
                                   StructuredOutputCompiler::kDefaultCompileLimit, limit);
  int64_t largest = 0;
  for (int i = 0; i < 120; ++i) {
    bounded.compile(distinct(i));
    largest = std::max(largest, bounded.cached_bytes());
  }
  EXPECT_GT(largest, limit / 4) << "the schemas were meant to fill the cache";
  EXPECT_LE(largest, limit);
  // The key counts: schemas whose 100 KiB description changes no grammar still fill it, and the
  // oldest go.
  const std::string description(100 << 10, 'x');
  const auto oldest = bounded.compile(distinct(1000, description));
  for (int i = 1; i < 8; ++i) {
    bounded.compile(distinct(1000 + i, description));
    EXPECT_GE(bounded.cached_bytes(), 100 << 10);
    EXPECT_LE(bounded.cached_bytes(), limit);
  }
  EXPECT_NE(bounded.compile(distinct(1000, description)), oldest) << "it was meant to be evicted";
  // A hit is the same compiled constraint; a failed compile adds nothing.
  const auto first = bounded.compile(distinct(5000));
  EXPECT_EQ(bounded.compile(distinct(5000)), first);
  const int64_t before = bounded.cached_bytes();
  for (int i = 0; i < 20; ++i)
    EXPECT_THROW(bounded.compile(spec(OutputConstraintSpec::Kind::regex, "(unclosed " + std::to_string(i))), Error);
  EXPECT_EQ(bounded.cached_bytes(), before);

  StructuredOutputCompiler uncached(*tiny().model.tokenizer, tiny().model.config.vocab_size, tiny().model.stop_ids,
                                    StructuredOutputCompiler::kDefaultCompileLimit, 0);
  for (int i = 0; i < 5; ++i) uncached.compile(distinct(i));
  EXPECT_EQ(uncached.cached_bytes(), 0);
  EXPECT_THROW(StructuredOutputCompiler(*tiny().model.tokenizer, tiny().model.config.vocab_size, tiny().model.stop_ids,
                                        StructuredOutputCompiler::kDefaultCompileLimit, -1),
               Error);
}

// Requests that ask for the same constraint while it compiles share that one compile.
TEST(StructuredOutput, RequestsForAConstraintBeingCompiledShareTheCompile) {
  TQ_REQUIRE_TESTDATA();
  StructuredOutputCompiler compiler(*tiny().model.tokenizer, tiny().model.config.vocab_size, tiny().model.stop_ids);
  std::vector<std::string> choices;  // slow enough that the requests overlap
  for (int i = 0; i < 3000; ++i) choices.push_back("shared choice number " + std::to_string(i));
  const OutputConstraintSpec slow = spec(OutputConstraintSpec::Kind::choice, "", choices);
  std::vector<std::shared_ptr<const CompiledConstraint>> got(4);
  std::vector<std::thread> requests;
  for (size_t i = 0; i < got.size(); ++i) requests.emplace_back([&, i] { got[i] = compiler.compile(slow); });
  for (std::thread& t : requests) t.join();
  for (const auto& g : got) EXPECT_EQ(g, got[0]);
  // Failures are shared too, each naming the field.
  std::vector<std::string> errors(3);
  requests.clear();
  for (size_t i = 0; i < errors.size(); ++i)
    requests.emplace_back([&, i] {
      try {
        compiler.compile(spec(OutputConstraintSpec::Kind::regex, "(never closed"));
      } catch (const Error& e) {
        errors[i] = e.what();
      }
    });
  for (std::thread& t : requests) t.join();
  for (const std::string& e : errors) EXPECT_NE(e.find("'test_field' is not a valid regex"), std::string::npos) << e;
}

TEST(StructuredOutput, BadConstraintsNameTheFieldAndTheProblem) {
  TQ_REQUIRE_TESTDATA();
  using Kind = OutputConstraintSpec::Kind;
  const auto message = [](const OutputConstraintSpec& s) {
    try {
      tiny().compiler.compile(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(spec(Kind::json_schema, "{not json")).find("'test_field' is not valid JSON"), std::string::npos);
  EXPECT_NE(message(spec(Kind::json_schema, R"({"type": "strin"})")).find("strin"), std::string::npos);
  EXPECT_NE(message(spec(Kind::regex, "(a")).find("'test_field' is not a valid regex"), std::string::npos);
  EXPECT_NE(message(spec(Kind::grammar, "root ::= (")).find("'test_field' is not a valid grammar"), std::string::npos);
  EXPECT_NE(message(spec(Kind::choice, "", {})).find("at least one choice"), std::string::npos);
  EXPECT_NE(message(spec(Kind::choice, "", {"a", ""})).find("choice 1 is empty"), std::string::npos);
  // No log prefix of xgrammar's own (time stamp, source path) reaches the user.
  EXPECT_EQ(message(spec(Kind::regex, "(a")).find(".cc:"), std::string::npos);
}

}  // namespace
}  // namespace tq
