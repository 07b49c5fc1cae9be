// Fuzzes the structured-output compilers (xgrammar's JSON-schema, regex and EBNF front ends and
// their token-mask compilation, through engine/structured_output.h) and the matcher that follows
// accepted tokens: the first input byte picks the kind, the rest is the schema, regex, grammar or
// a newline-separated choice list. The server catches tq::Error from compile() (a 400), so that
// is all this harness catches. A constraint that compiles is then walked for a few tokens, each
// the first one its mask allows: a mask that allows a token the matcher then refuses is a bug.
// The vocabulary is stories260K's (512 tokens: compiling against it is fast enough to fuzz),
// else SmolLM2's. The compiled-grammar cache is off: kept grammars would make every input look
// like a leak to libFuzzer, which then runs LeakSanitizer after each one (most of the time spent).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/structured_output.h"
#include "errors/error.h"
#include "fuzz/fuzz_common.h"
#include "model/loader.h"

namespace {

struct Vocabulary {
  std::unique_ptr<tq::Tokenizer> tokenizer;
  std::unique_ptr<tq::StructuredOutputCompiler> compiler;
};

const Vocabulary& vocabulary() {
  static const Vocabulary v = [] {
    tq::LoadOptions options;
    options.with_weights = false;
    tq::LoadedModel m = [&] {
      try {
        return tq::load_model(tq::fuzz::testdata("stories260K/stories260K.gguf"), options);
      } catch (const tq::Error&) {
        return tq::load_model(tq::find_default_model(), options);
      }
    }();
    Vocabulary out;
    out.tokenizer = std::move(m.tokenizer);
    out.compiler = std::make_unique<tq::StructuredOutputCompiler>(
        *out.tokenizer, m.config.vocab_size, m.stop_ids, tq::StructuredOutputCompiler::kDefaultCompileLimit, /*cache_bytes=*/0);
    return out;
  }();
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Vocabulary& v = vocabulary();
  using Kind = tq::OutputConstraintSpec::Kind;
  tq::OutputConstraintSpec spec;
  static constexpr Kind kinds[] = {Kind::json_schema, Kind::regex, Kind::grammar, Kind::choice, Kind::json_object};
  spec.kind = kinds[data[0] % 5];
  spec.field = "fuzz";
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  if (spec.kind == Kind::choice) {
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) spec.choices.push_back(text.substr(start, nl - start));
    spec.choices.push_back(text.substr(start));
  } else {
    spec.text = text;
  }
  std::shared_ptr<const tq::CompiledConstraint> compiled;
  try {
    compiled = v.compiler->compile(spec);
  } catch (const tq::Error&) {
    return 0;
  }
  tq::OutputConstraint constraint(compiled);
  std::vector<float> logits(static_cast<size_t>(v.compiler->vocab_size()));
  for (int step = 0; step < 8 && !constraint.terminated(); ++step) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    constraint.mask(logits);
    int allowed = -1;
    for (size_t i = 0; i < logits.size() && allowed < 0; ++i)
      if (!std::isinf(logits[i])) allowed = static_cast<int>(i);
    if (allowed < 0) break;  // nothing can follow (an empty language): the engine ends the request
    if (!constraint.accept(allowed)) tq::fuzz::invariant_failed("the mask allowed a token the matcher refused");
  }
  return 0;
}
