// Structured output: a request's tokens constrained to a JSON schema, JSON, a regular expression,
// a list of choices or a grammar (GBNF / xgrammar's EBNF). xgrammar (its C++ core, built from the
// pinned sdist by scripts/setup.sh) compiles the constraint against the model's vocabulary once and
// keeps a per-token mask cache; per request a matcher follows the accepted tokens and gives, before
// each sampling step, the set of tokens that keep the output a prefix of some valid answer.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tq {

// What the output must match, as the API asked for it.
struct OutputConstraintSpec {
  // tool_calls: 1 to max_repeats Hermes-style calls, each "<tool_call>\n" + JSON matching the
  // schema in `text` + "\n</tool_call>", separated by newlines.
  enum class Kind { json_object, json_schema, regex, choice, grammar, tool_calls };
  Kind kind = Kind::json_object;
  std::string text;                  // json_schema, tool_calls: the schema (JSON); regex; grammar (EBNF)
  std::vector<std::string> choices;  // choice: the output is exactly one of them
  int max_repeats = 1;               // tool_calls
  std::string field;                 // the request field it came from, for error messages
};
const char* constraint_kind_name(OutputConstraintSpec::Kind kind);

class CompiledConstraint;  // a compiled grammar, shared by the requests that ask for it

// One per served model: the vocabulary as xgrammar sees it, its compiler, and a cache of compiled
// constraints, so requests with the same schema share one (also while it compiles), up to
// cache_bytes: a stream of distinct schemas must not grow the server without bound. Thread-safe.
class StructuredOutputCompiler {
 public:
  // vocab_size: the model's logits width (it may exceed the tokenizer's vocabulary; the rest are
  // never allowed). stop_ids: the tokens that end a request (EOS): a complete answer is followed
  // by one of them, and only then.
  // compile_limit: how long compile() waits for one constraint. cache_bytes: the most memory
  // compiled grammars are kept in (least recently used ones go first); 0 keeps none.
  StructuredOutputCompiler(const Tokenizer& tokenizer, int vocab_size, std::vector<TokenId> stop_ids,
                           std::chrono::milliseconds compile_limit = kDefaultCompileLimit,
                           int64_t cache_bytes = kDefaultCacheBytes);
  ~StructuredOutputCompiler();

  static constexpr std::chrono::milliseconds kDefaultCompileLimit{10000};
  static constexpr int64_t kDefaultCacheBytes = int64_t{512} << 20;  // vLLM's xgrammar cache default
  // Compiles past their limit that may still be running before new ones are refused: a slow
  // compile cannot be stopped, only left to finish on its own thread.
  static constexpr int kMaxOverdueCompiles = 2;

  // Throws tq::Error naming spec.field and what is wrong (an invalid schema, regex or grammar; a
  // compile that took longer than the limit; too many overdue compiles still running).
  std::shared_ptr<const CompiledConstraint> compile(const OutputConstraintSpec& spec) const;

  int vocab_size() const { return vocab_size_; }
  int overdue_compiles() const;  // still running past their limit
  int64_t cached_bytes() const;   // held by the cache of compiled grammars now

 private:
  struct State;
  std::shared_ptr<State> state_;  // shared with compiles that outlive their request
  int vocab_size_;
  std::chrono::milliseconds compile_limit_;
};

// A request's position in its constraint. Not thread-safe: the engine thread owns it.
class OutputConstraint {
 public:
  explicit OutputConstraint(std::shared_ptr<const CompiledConstraint> compiled);
  ~OutputConstraint();
  OutputConstraint(OutputConstraint&&) noexcept;
  OutputConstraint& operator=(OutputConstraint&&) noexcept;

  // logits: [vocab], in place: every token that cannot come next becomes -infinity.
  void mask(std::span<float> logits);
  // Advances past `id`; false if the constraint does not allow it (the state is then unchanged).
  bool accept(TokenId id);
  // The answer is complete and its stop token accepted.
  bool terminated() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tq
