// One generation request as the engine tracks it: its tokens, how many of them have K/V in the
// cache, its blocks, its sampler and the text it has produced so far.
//
// As in vLLM v1 there is no prefill or decode phase: a request has num_tokens() tokens (prompt
// plus output), num_computed of them are in the cache, and each step computes some of the rest.
// When num_computed reaches num_tokens() the last step's logits give the next token.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "engine/structured_output.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "tokenizer/tokenizer.h"

namespace tq {

enum class RequestStatus { waiting, running, finished };

// Why a request ended (OpenAI's finish_reason, plus the engine's own).
enum class FinishReason { none, stop, length, abort, error };
const char* finish_reason_name(FinishReason r);

struct RequestTiming {
  using Clock = std::chrono::steady_clock;
  Clock::time_point arrival;
  std::optional<Clock::time_point> first_token, last_token;
};

// What the engine reports for one request after a step: the tokens it added and, at the end,
// why it finished. Text is complete UTF-8 with stop strings held back and removed.
struct RequestOutput {
  uint64_t id = 0;
  std::vector<TokenId> new_ids;
  std::string new_text;
  std::vector<SampleResult> new_logprobs;  // [new_ids.size()] when logprobs were asked for
  // Set once, on the request's first output when prompt logprobs were asked for:
  // [prompt.size()] (the first has no logprob: logprob 0 and no alternatives).
  std::vector<SampleResult> prompt_logprobs;
  FinishReason finish = FinishReason::none;
  std::string error;  // finish == error
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;  // prompt tokens found in the prefix cache
  int num_output_tokens = 0;  // so far
};

struct Request {
  Request(uint64_t id, std::vector<TokenId> prompt, SamplingParams params, int prompt_logprobs = -1);

  uint64_t id;
  std::vector<TokenId> tokens;  // prompt then output
  int num_prompt_tokens;
  SamplingParams params;
  int prompt_logprobs;  // -1: none; k >= 0: each prompt token's logprob and k alternatives
  Sampler sampler;

  RequestStatus status = RequestStatus::waiting;
  FinishReason finish = FinishReason::none;
  int num_computed = 0;       // tokens whose K/V are in the cache
  int num_cached_tokens = 0;  // prompt tokens the prefix cache supplied (first admission)
  int num_preemptions = 0;
  bool prefix_lookup_counted = false;
  bool prompt_logprobs_done = false;
  std::vector<SampleResult> pending_prompt_logprobs;  // [num_prompt_tokens] while the prompt is computed
  BlockTable table;
  BlockHashes hashes;
  RequestTiming timing;

  // Text assembly (the engine's tokenizer; absent without one).
  std::optional<StreamDecoder> decoder;
  std::optional<StopMatcher> stops;
  // Structured output: where the output stands in params.constraint (set when there is one).
  std::optional<OutputConstraint> constraint;

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const TokenId> prompt() const { return std::span(tokens).first(num_prompt_tokens); }
  std::span<const TokenId> output() const { return std::span(tokens).subspan(num_prompt_tokens); }
  bool finished() const { return status == RequestStatus::finished; }
};

}  // namespace tq
