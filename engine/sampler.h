// Host-side token sampling for one request: logit penalties, temperature, min-p / top-k / top-p
// truncation, a seeded draw that is reproducible across runs and platforms, and logprobs of the
// raw model distribution. Semantics follow vLLM (v1 engine) so results are comparable.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tq {

class CompiledConstraint;  // engine/structured_output.h

// Per-request decoding parameters (OpenAI / vLLM names and ranges).
struct SamplingParams {
  float temperature = 1.0f;         // 0 (or below 1e-5) = greedy argmax
  int top_k = 0;                    // 0 or -1 = off
  float top_p = 1.0f;               // (0, 1]; 1 = off
  float min_p = 0.0f;               // [0, 1], relative to the most likely token; 0 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off; applies to prompt and output tokens
  float presence_penalty = 0.0f;    // [-2, 2]; output tokens only
  float frequency_penalty = 0.0f;   // [-2, 2]; output tokens only
  std::optional<uint64_t> seed;     // set = reproducible draws; unset = seeded from random_device
  int max_tokens = 256;             // >= 1
  std::vector<std::string> stop;    // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = -1;  // -1 none, 0 chosen token only, k in [1, 20] also the top-k alternatives
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to the logits before the penalties.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Structured output: the tokens must follow this compiled constraint (null: free text). The
  // engine masks the logits before sampling, so logprobs are those of the masked distribution,
  // as in vLLM.
  std::shared_ptr<const CompiledConstraint> constraint;

  static constexpr int kMaxLogprobs = 20;             // vLLM's default max_logprobs
  static constexpr float kGreedyTemperature = 1e-5f;  // vLLM's _SAMPLING_EPS

  bool is_greedy() const { return temperature < kGreedyTemperature; }

  // Throws tq::Error naming the offending parameter, its value and the allowed range.
  void validate() const;
};

// Extra outputs of one sampling step. Logprobs are log-softmax of the UNMODIFIED logits (before
// penalties, temperature and truncation), matching vLLM's default logprobs_mode="raw_logprobs".
struct SampleResult {
  float logprob = 0.0f;                        // of the chosen token
  std::vector<std::pair<int32_t, float>> top;  // [max(logprobs, 0)] (token id, logprob), best first
};

// One token of the final sampling distribution (after every processing step), for inspection.
struct TokenProbability {
  int32_t token_id = 0;
  double probability = 0.0;
};

// Reusable scratch for apply_penalties so a step costs O(prompt + output), not O(vocab)
// allocations. All arrays are kept zeroed between calls.
struct PenaltyScratch {
  std::vector<uint8_t> seen;           // [vocab] 1 = token occurs in prompt or output
  std::vector<int32_t> output_counts;  // [vocab] occurrences in the output
  std::vector<int32_t> touched_ids;    // ids whose entries must be reset after a call
};

// The logit-processing step, exposed for testing. In vLLM's order:
//   repetition penalty over tokens in prompt ∪ output: positive logit /= p, otherwise *= p;
//   then output tokens only: logit -= frequency_penalty * count; logit -= presence_penalty.
// logits: [vocab], modified in place. Token ids outside [0, vocab) throw tq::Error.
void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, const SamplingParams& params,
                     PenaltyScratch& scratch);
void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, const SamplingParams& params);

// Samples tokens for one request. Not thread-safe: one Sampler per request (it owns the RNG
// stream).
//
// Pipeline (vLLM v1 order): logit_bias -> penalties -> greedy argmax if temperature < 1e-5 (ties -> lowest id;
// top-k/top-p/min-p are irrelevant there) -> logits / temperature -> min-p -> top-k -> top-p ->
// draw from the renormalised remainder. min-p runs before top-k/top-p as in vLLM v1, where it is
// an argmax-invariant logits processor applied before the top-k/top-p sampler; the order matters
// because top-p measures mass relative to what survived earlier filters.
//
// Ties in rank (equal logits) are broken by lower token id, so top-k keeps exactly k tokens and
// top_k = 1 always equals greedy (vLLM keeps every token tied with the k-th).
//
// Reproducibility: with a seed, the RNG is std::mt19937_64 (fully specified by the standard) and
// uniforms are built from its raw 53 high bits; candidates are visited in a fixed order (token id
// order without truncation or with min-p only, rank order with top-k, and the order of our own
// deterministic quickselect with top-p alone), so the same seed and logits give the same tokens
// on every platform, up to libm's exp rounding at probability boundaries.
class Sampler {
 public:
  // Validates params (throws tq::Error).
  explicit Sampler(SamplingParams params);

  // logits: [vocab] for the next position. prompt_ids / output_ids: the request's tokens so far
  // (feed the penalties). extra, if given, receives the chosen token's raw logprob and the top
  // max(params.logprobs, 0) alternatives.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> prompt_ids,
                 std::span<const int32_t> output_ids, SampleResult* extra = nullptr);

  // The distribution sample() would draw from (without drawing): kept tokens and their
  // probabilities summing to 1, in draw order. Greedy gives the argmax with probability 1.
  std::vector<TokenProbability> distribution(std::span<const float> logits,
                                             std::span<const int32_t> prompt_ids,
                                             std::span<const int32_t> output_ids);

  const SamplingParams& params() const { return params_; }

  // Logprob of `chosen` under log-softmax(raw_logits) and the num_top most likely alternatives
  // (prompt logprobs use it directly).
  static void fill_logprobs(std::span<const float> raw_logits, int32_t chosen, int num_top, SampleResult& extra);

 private:
  struct Candidate {
    float logit;  // after penalties and temperature
    int32_t id;
    float weight;  // exp(logit - max logit), unnormalised probability (sums are in double)
  };
  // Rank order: higher logit first, equal logits -> lower id. A strict total order, so sorting
  // under it gives one answer on every platform.
  static bool by_rank(const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  }
  static constexpr size_t kHeapTopKLimit = 1024;  // above: nth_element instead of a bounded heap
  static constexpr size_t kTopPSortBelow = 32;    // quickselect ranges this small are just sorted

  // Applies penalties into processed_logits_ and returns it: [vocab].
  std::span<float> processed_logits(std::span<const float> logits,
                                    std::span<const int32_t> prompt_ids,
                                    std::span<const int32_t> output_ids);
  // Leaves the kept tokens with their weights in candidates_ (in draw order). Sampling path only.
  void build_candidates(std::span<float> processed);
  // Reorders candidates_ so that its kept top-p prefix comes first; returns the prefix length:
  // the shortest rank prefix whose weight sum reaches target.
  size_t top_p_prefix(double target);
  double next_uniform();  // [0, 1) from 53 random bits

  SamplingParams params_;
  std::mt19937_64 rng_;
  PenaltyScratch penalty_scratch_;
  std::vector<float> processed_logits_;  // [vocab]
  std::vector<Candidate> candidates_;    // [<= vocab]
};

}  // namespace tq
