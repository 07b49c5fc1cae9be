#include "engine/structured_output.h"

#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "errors/error.h"

namespace tq {

const char* constraint_kind_name(OutputConstraintSpec::Kind kind) {
  switch (kind) {
    case OutputConstraintSpec::Kind::json_object: return "json_object";
    case OutputConstraintSpec::Kind::json_schema: return "json_schema";
    case OutputConstraintSpec::Kind::regex: return "regex";
    case OutputConstraintSpec::Kind::choice: return "choice";
    case OutputConstraintSpec::Kind::grammar: return "grammar";
    case OutputConstraintSpec::Kind::tool_calls: return "tool call schema";
  }
  return "?";
}

class CompiledConstraint {
 public:
  explicit CompiledConstraint(xgrammar::CompiledGrammar g, int vocab_size) : grammar(std::move(g)), vocab(vocab_size) {}
  xgrammar::CompiledGrammar grammar;
  int vocab;
};

namespace {

// xgrammar's vocabulary: each token's bytes as they appear in text (VocabType::RAW, so one form
// serves byte-level BPE and SentencePiece alike); special tokens as "" (xgrammar never allows
// those inside an answer; the stop tokens are given apart).
xgrammar::TokenizerInfo make_tokenizer_info(const Tokenizer& tokenizer, int vocab_size, const std::vector<TokenId>& stop_ids) {
  const int n = std::min(tokenizer.vocab_size(), vocab_size);
  std::vector<std::string> vocab(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id)
    if (!tokenizer.is_special(id)) vocab[size_t(id)] = tokenizer.token_bytes(id);
  std::vector<int32_t> stops;
  for (TokenId id : stop_ids)
    if (id >= 0 && id < vocab_size) stops.push_back(id);
  return xgrammar::TokenizerInfo(vocab, xgrammar::VocabType::RAW, vocab_size, stops);
}

// An EBNF string literal for `s` (JSON's escapes are a subset of the ones xgrammar reads).
std::string ebnf_literal(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// xgrammar's message without its log prefixes ("[hh:mm:ss] /path/file.cc:123: "), first line only.
std::string xgrammar_reason(const std::string& message) {
  std::string m = message.substr(0, message.find('\n'));
  for (size_t source; (source = m.find(".cc:")) != std::string::npos;) {
    const size_t start = m.rfind('[', source);
    const size_t colon = m.find(": ", source + 4);
    if (start == std::string::npos || colon == std::string::npos) break;
    m.erase(start, colon + 2 - start);
  }
  return m;
}

// Compiled constraints kept for reuse within a byte budget that counts each grammar and its key
// (the request text that produced it), least recently used out first. Only successful compiles
// are kept: xgrammar's own cache also keeps failed ones, at no counted size, and not the keys.
class ConstraintCache {
 public:
  explicit ConstraintCache(int64_t limit) : limit_(limit) {}

  std::shared_ptr<const CompiledConstraint> find(const std::string& key) {
    std::lock_guard lock(mutex_);
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->value;
  }

  void insert(const std::string& key, std::shared_ptr<const CompiledConstraint> value) {
    const int64_t bytes = int64_t(value->grammar.MemorySizeBytes() + key.size());
    std::vector<std::shared_ptr<const CompiledConstraint>> evicted;  // freed after the lock
    std::lock_guard lock(mutex_);
    if (bytes > limit_) return;
    const auto [it, inserted] = index_.emplace(key, lru_.end());
    if (!inserted) return;
    try {
      lru_.push_front(Entry{&it->first, std::move(value), bytes});
    } catch (...) {
      index_.erase(it);
      throw;
    }
    it->second = lru_.begin();
    bytes_ += bytes;
    while (bytes_ > limit_) {
      Entry& oldest = lru_.back();
      bytes_ -= oldest.bytes;
      evicted.push_back(std::move(oldest.value));
      index_.erase(*oldest.key);
      lru_.pop_back();
    }
  }

  int64_t bytes() const {
    std::lock_guard lock(mutex_);
    return bytes_;
  }

 private:
  struct Entry {
    const std::string* key;  // the index's own copy
    std::shared_ptr<const CompiledConstraint> value;
    int64_t bytes;
  };
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  const int64_t limit_;
  int64_t bytes_ = 0;
};

// What identifies a compiled constraint: every field that goes into the grammar, each length-prefixed.
std::string cache_key(const OutputConstraintSpec& spec) {
  std::string key = fmt::format("{}:{}:{}:{}", static_cast<int>(spec.kind), spec.max_repeats, spec.text.size(), spec.text);
  for (const std::string& c : spec.choices) key += fmt::format(":{}:{}", c.size(), c);
  return key;
}

int64_t checked_cache_bytes(int64_t cache_bytes) {
  if (cache_bytes < 0) fail("the structured-output cache size must be >= 0 bytes, got {}", cache_bytes);
  return cache_bytes;
}

}  // namespace

struct StructuredOutputCompiler::State {
  State(const Tokenizer& tokenizer, int vocab_size, const std::vector<TokenId>& stop_ids, int64_t cache_bytes)
      : info(make_tokenizer_info(tokenizer, vocab_size, stop_ids)),
        // One compiling thread per request (the server's own threads run compiles side by side);
        // xgrammar's cache off: ours (below) keeps what compiled.
        compiler(info, /*max_threads=*/1, /*cache_enabled=*/false),
        cache(cache_bytes) {}
  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
  ConstraintCache cache;
  std::atomic<int> overdue{0};
  // Compiles under way, by field and cache key: a request asking for one waits for it.
  std::mutex running_mutex;
  std::unordered_map<std::string, std::shared_future<std::shared_ptr<const CompiledConstraint>>> running;
};

namespace {

std::shared_ptr<const CompiledConstraint> compile_now(xgrammar::GrammarCompiler& compiler, const OutputConstraintSpec& spec,
                                                      int vocab_size_);

}  // namespace

StructuredOutputCompiler::StructuredOutputCompiler(const Tokenizer& tokenizer, int vocab_size, std::vector<TokenId> stop_ids,
                                                   std::chrono::milliseconds compile_limit, int64_t cache_bytes)
    : state_(std::make_shared<State>(tokenizer, vocab_size, stop_ids, checked_cache_bytes(cache_bytes))),
      vocab_size_(vocab_size),
      compile_limit_(compile_limit) {}

StructuredOutputCompiler::~StructuredOutputCompiler() = default;

int StructuredOutputCompiler::overdue_compiles() const { return state_->overdue.load(); }

int64_t StructuredOutputCompiler::cached_bytes() const { return state_->cache.bytes(); }

std::shared_ptr<const CompiledConstraint> StructuredOutputCompiler::compile(const OutputConstraintSpec& spec) const {
  using Result = std::shared_ptr<const CompiledConstraint>;
  std::string key = cache_key(spec);
  if (auto cached = state_->cache.find(key)) return cached;
  // Requests that ask for a constraint while it compiles wait for that compile rather than start
  // their own (keyed by field too: a failure's message names the field it came from).
  std::string running_key = spec.field + '\n' + key;
  std::shared_future<Result> result;
  std::shared_ptr<std::atomic<bool>> ended_or_abandoned;  // set only where this call started the compile
  {
    std::lock_guard lock(state_->running_mutex);
    if (const auto it = state_->running.find(running_key); it != state_->running.end()) {
      result = it->second;
    } else {
      if (state_->overdue.load() >= kMaxOverdueCompiles)
        fail("'{}': {} earlier constraints are still compiling past the {} ms limit; try again later", spec.field,
             state_->overdue.load(), compile_limit_.count());
      // The compile runs on a thread of its own, which keeps the compiler's state alive and, if
      // the request stops waiting, takes itself off the overdue count when it ends. What it
      // compiles is kept even when its request gave up, for the next one to ask.
      auto task = std::make_shared<std::packaged_task<Result()>>([state = state_, spec, vocab = vocab_size_, key = std::move(key)] {
        Result compiled = compile_now(state->compiler, spec, vocab);
        state->cache.insert(key, compiled);
        return compiled;
      });
      result = task->get_future().share();
      ended_or_abandoned = std::make_shared<std::atomic<bool>>(false);
      state_->running.emplace(running_key, result);
      try {
        std::thread([task, ended_or_abandoned, state = state_, running_key] {
          (*task)();
          {
            std::lock_guard done(state->running_mutex);
            state->running.erase(running_key);
          }
          if (ended_or_abandoned->exchange(true)) state->overdue.fetch_sub(1);
        }).detach();
      } catch (...) {
        state_->running.erase(running_key);
        throw;
      }
    }
  }
  if (result.wait_for(compile_limit_) != std::future_status::ready) {
    if (ended_or_abandoned) {
      state_->overdue.fetch_add(1);
      if (ended_or_abandoned->exchange(true)) state_->overdue.fetch_sub(1);  // it ended just now after all
      else fail("'{}' took longer than {} ms to compile: simplify it", spec.field, compile_limit_.count());
    } else if (result.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      fail("'{}' took longer than {} ms to compile: simplify it", spec.field, compile_limit_.count());
    }
  }
  return result.get();  // rethrows compile_now's error
}

namespace {

std::shared_ptr<const CompiledConstraint> compile_now(xgrammar::GrammarCompiler& compiler, const OutputConstraintSpec& spec,
                                                      int vocab_size_) {
  using Kind = OutputConstraintSpec::Kind;
  try {
    switch (spec.kind) {
      case Kind::json_object:
        return std::make_shared<CompiledConstraint>(compiler.CompileBuiltinJSONGrammar(), vocab_size_);
      case Kind::json_schema: {
        // What is not JSON is refused here, in our words, before xgrammar sees it.
        const auto parsed = nlohmann::json::parse(spec.text, nullptr, false);
        if (parsed.is_discarded()) fail("'{}' is not valid JSON", spec.field);
        if (!parsed.is_object() && !parsed.is_boolean()) fail("'{}' must be a JSON schema object", spec.field);
        // Compact JSON (no free whitespace between tokens): a small model given free whitespace
        // can spend its whole budget on newlines and never close the object.
        return std::make_shared<CompiledConstraint>(
            compiler.CompileJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                       /*strict_mode=*/true),
            vocab_size_);
      }
      case Kind::regex:
        return std::make_shared<CompiledConstraint>(compiler.CompileRegex(spec.text), vocab_size_);
      case Kind::choice: {
        if (spec.choices.empty()) fail("'{}' must list at least one choice", spec.field);
        std::string ebnf = "root ::= ";
        for (size_t i = 0; i < spec.choices.size(); ++i) {
          if (spec.choices[i].empty()) fail("'{}' choice {} is empty", spec.field, i);
          ebnf += (i ? " | " : "") + ebnf_literal(spec.choices[i]);
        }
        return std::make_shared<CompiledConstraint>(
            compiler.CompileGrammar(xgrammar::Grammar::FromEBNF(ebnf, "root")), vocab_size_);
      }
      case Kind::grammar:
        return std::make_shared<CompiledConstraint>(
            compiler.CompileGrammar(xgrammar::Grammar::FromEBNF(spec.text, "root")), vocab_size_);
      case Kind::tool_calls: {
        using xgrammar::Grammar;
        const Grammar call = Grammar::FromJSONSchema(spec.text, /*any_whitespace=*/false, std::nullopt, std::nullopt,
                                                     /*strict_mode=*/true);
        const Grammar open = Grammar::FromEBNF(R"(root ::= "<tool_call>\n")");
        const Grammar close = Grammar::FromEBNF(R"(root ::= "\n</tool_call>")");
        const Grammar newline = Grammar::FromEBNF(R"(root ::= "\n")");
        std::vector<Grammar> counts;  // k calls, k = 1..max_repeats
        std::vector<Grammar> parts;
        for (int k = 1; k <= std::max(1, spec.max_repeats); ++k) {
          if (k > 1) parts.push_back(newline);
          parts.insert(parts.end(), {open, call, close});
          counts.push_back(Grammar::Concat(parts));
        }
        return std::make_shared<CompiledConstraint>(
            compiler.CompileGrammar(counts.size() == 1 ? counts[0] : Grammar::Union(counts)), vocab_size_);
      }
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("'{}' is not a valid {}: {}", spec.field, constraint_kind_name(spec.kind), xgrammar_reason(e.what()));
  }
  fail("'{}': unknown constraint kind", spec.field);
}

}  // namespace

struct OutputConstraint::State {
  explicit State(std::shared_ptr<const CompiledConstraint> c)
      : compiled(std::move(c)), matcher(compiled->grammar), bitmask(size_t(xgrammar::GetBitmaskSize(compiled->vocab))) {}
  std::shared_ptr<const CompiledConstraint> compiled;  // the matcher refers to its grammar
  xgrammar::GrammarMatcher matcher;
  std::vector<int32_t> bitmask;  // [ceil(vocab / 32)] bit i of word i / 32: token i allowed
};

OutputConstraint::OutputConstraint(std::shared_ptr<const CompiledConstraint> compiled)
    : state_(std::make_unique<State>(std::move(compiled))) {}
OutputConstraint::~OutputConstraint() = default;
OutputConstraint::OutputConstraint(OutputConstraint&&) noexcept = default;
OutputConstraint& OutputConstraint::operator=(OutputConstraint&&) noexcept = default;

void OutputConstraint::mask(std::span<float> logits) {
  State& s = *state_;
  int64_t shape = int64_t(s.bitmask.size());
  DLTensor t{};
  t.data = s.bitmask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = &shape;
  s.matcher.FillNextTokenBitmask(&t);
  const size_t n = std::min(logits.size(), size_t(s.compiled->vocab));
  const auto* words = reinterpret_cast<const uint32_t*>(s.bitmask.data());
  for (size_t i = 0; i < n; ++i)
    if (!((words[i >> 5] >> (i & 31)) & 1u)) logits[i] = -std::numeric_limits<float>::infinity();
  for (size_t i = n; i < logits.size(); ++i) logits[i] = -std::numeric_limits<float>::infinity();
}

bool OutputConstraint::accept(TokenId id) {
  if (id < 0 || id >= state_->compiled->vocab) return false;
  return state_->matcher.AcceptToken(id);
}

bool OutputConstraint::terminated() const { return state_->matcher.IsTerminated(); }

}  // namespace tq
