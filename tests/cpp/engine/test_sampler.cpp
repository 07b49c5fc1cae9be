// Tests for engine/sampler: parameter validation, penalties, greedy, temperature, truncation
// (top-k / top-p / min-p), seeded reproducibility and raw logprobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "errors/error.h"

namespace tq {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const std::vector<int32_t> kNoTokens;

SamplingParams seeded(uint64_t seed) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

std::vector<double> softmax(const std::vector<double>& logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> probs(logits.size());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) sum += probs[i] = std::exp(logits[i] - max);
  for (double& p : probs) p /= sum;
  return probs;
}

std::vector<float> random_logits(size_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = static_cast<float>(rng() % 20000) / 1000.0f - 10.0f;  // [-10, 10)
  return logits;
}

// Logits whose softmax is exactly the given probabilities (up to rounding).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

std::set<int32_t> kept_ids(const std::vector<TokenProbability>& distribution) {
  std::set<int32_t> ids;
  for (const TokenProbability& t : distribution) ids.insert(t.token_id);
  return ids;
}

// ---------------------------------------------------------------------------------------------
// validate()

TEST(SamplingParamsTest, DefaultsAreValid) { EXPECT_NO_THROW(SamplingParams{}.validate()); }

TEST(SamplingParamsTest, BoundaryValuesAreValid) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_k = -1;
  params.top_p = 1.0f;
  params.min_p = 1.0f;
  params.presence_penalty = -2.0f;
  params.frequency_penalty = 2.0f;
  params.repetition_penalty = 0.01f;
  params.max_tokens = 1;
  params.logprobs = 20;
  EXPECT_NO_THROW(params.validate());
  params.temperature = 5.0f;  // no upper bound (vLLM): high temperature + min_p is a common recipe
  params.logprobs = -1;
  EXPECT_NO_THROW(params.validate());
}

TEST(SamplingParamsTest, InvalidValuesNameTheParameterAndRange) {
  struct Case {
    std::function<void(SamplingParams&)> set;
    std::string expected;  // substring of the error
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {[](SamplingParams& p) { p.temperature = -0.1f; },
       "temperature must be a finite number >= 0"},
      {[&](SamplingParams& p) { p.temperature = nan; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = kInf; }, "temperature"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p must be in (0, 1]"},
      {[](SamplingParams& p) { p.top_p = 1.01f; }, "top_p must be in (0, 1]"},
      {[&](SamplingParams& p) { p.top_p = nan; }, "top_p"},
      {[](SamplingParams& p) { p.top_k = -2; }, "top_k must be 0 or -1 (disabled) or at least 1"},
      {[](SamplingParams& p) { p.min_p = -0.01f; }, "min_p must be in [0, 1]"},
      {[](SamplingParams& p) { p.min_p = 1.5f; }, "min_p must be in [0, 1]"},
      {[](SamplingParams& p) { p.repetition_penalty = 0.0f; },
       "repetition_penalty must be a finite number > 0"},
      {[](SamplingParams& p) { p.repetition_penalty = -1.0f; }, "repetition_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty must be in [-2, 2]"},
      {[](SamplingParams& p) { p.frequency_penalty = -2.5f; },
       "frequency_penalty must be in [-2, 2]"},
      {[](SamplingParams& p) { p.max_tokens = 0; }, "max_tokens must be at least 1"},
      {[](SamplingParams& p) { p.logprobs = 21; }, "logprobs must be in [-1, 20]"},
      {[](SamplingParams& p) { p.logprobs = -2; }, "logprobs must be in [-1, 20]"},
      {[](SamplingParams& p) {
         p.stop = {"ok", ""};
       },
       "stop[1] is an empty string"},
      {[](SamplingParams& p) {
         p.stop_token_ids = {3, -1};
       },
       "stop_token_ids[1] must be >= 0"},
  };
  for (const Case& c : cases) {
    SamplingParams params;
    c.set(params);
    try {
      params.validate();
      ADD_FAILURE() << "no error for expected message: " << c.expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos)
          << "message: " << e.what() << "\nexpected to contain: " << c.expected;
    }
  }
}

TEST(SamplerTest, LogitBiasShiftsTheChoiceAndIsChecked) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.5f};
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(Sampler(p).sample(logits, {}, {}), 1);
  p.logit_bias = {{3, 100.0f}};  // the least likely token becomes the most likely
  EXPECT_EQ(Sampler(p).sample(logits, {}, {}), 3);
  p.logit_bias = {{1, -1.5f}};  // 3 - 1.5 < 2: token 2 wins
  EXPECT_EQ(Sampler(p).sample(logits, {}, {}), 2);
  // Logprobs stay those of the raw logits (vLLM's raw_logprobs).
  SampleResult extra;
  p.logprobs = 0;
  Sampler(p).sample(logits, {}, {}, &extra);
  double z = 0;
  for (float x : logits) z += std::exp(double(x));
  EXPECT_NEAR(extra.logprob, 2.0 - std::log(z), 1e-5);
  p.logit_bias = {{1, 100.5f}};
  EXPECT_THROW(p.validate(), Error);
  p.logit_bias = {{4, 1.0f}};  // outside a vocabulary of 4
  Sampler outside(p);
  EXPECT_THROW(outside.sample(logits, {}, {}), Error);
}

TEST(SamplerTest, ConstructorValidates) {
  SamplingParams params;
  params.top_p = 0.0f;
  EXPECT_THROW(Sampler{params}, Error);
}

// ---------------------------------------------------------------------------------------------
// Penalties (the exposed logit-processing step)

TEST(ApplyPenaltiesTest, ExactEffectOnLogits) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 0.5f;
  params.presence_penalty = 0.25f;
  std::vector<float> logits = {2.0f, -2.0f, 1.0f, 0.5f, 3.0f, 0.0f};
  const std::vector<int32_t> prompt = {0, 1, 5};
  const std::vector<int32_t> output = {2, 2, 3};
  apply_penalties(logits, prompt, output, params);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);    // prompt, positive: 2 / 2
  EXPECT_FLOAT_EQ(logits[1], -4.0f);   // prompt, negative: -2 * 2
  EXPECT_FLOAT_EQ(logits[2], -0.75f);  // output x2: 1 / 2 - 0.5 * 2 - 0.25
  EXPECT_FLOAT_EQ(logits[3], -0.5f);   // output x1: 0.5 / 2 - 0.5 * 1 - 0.25
  EXPECT_FLOAT_EQ(logits[4], 3.0f);    // never seen: untouched
  EXPECT_FLOAT_EQ(logits[5], 0.0f);    // zero logit: 0 * 2
}

TEST(ApplyPenaltiesTest, RepetitionAppliesOnceForTokensInPromptAndOutput) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  std::vector<float> logits = {4.0f, 4.0f};
  const std::vector<int32_t> prompt = {0, 0, 0};
  const std::vector<int32_t> output = {0, 0};
  apply_penalties(logits, prompt, output, params);
  EXPECT_FLOAT_EQ(logits[0], 2.0f);
  EXPECT_FLOAT_EQ(logits[1], 4.0f);
}

TEST(ApplyPenaltiesTest, FrequencyAndPresenceIgnorePromptTokens) {
  SamplingParams params;
  params.frequency_penalty = 1.0f;
  params.presence_penalty = 1.0f;
  std::vector<float> logits = {1.0f, 1.0f};
  const std::vector<int32_t> prompt = {0, 0};
  const std::vector<int32_t> output = {1, 1, 1};
  apply_penalties(logits, prompt, output, params);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);
  EXPECT_FLOAT_EQ(logits[1], 1.0f - 3.0f - 1.0f);
}

TEST(ApplyPenaltiesTest, NegativePenaltiesEncourageTokens) {
  SamplingParams params;
  params.repetition_penalty = 0.5f;
  params.presence_penalty = -1.0f;
  std::vector<float> logits = {2.0f, -2.0f};
  const std::vector<int32_t> output = {0, 1};
  apply_penalties(logits, kNoTokens, output, params);
  EXPECT_FLOAT_EQ(logits[0], 2.0f / 0.5f + 1.0f);
  EXPECT_FLOAT_EQ(logits[1], -2.0f * 0.5f + 1.0f);
}

TEST(ApplyPenaltiesTest, ScratchIsResetBetweenCalls) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 1.0f;
  PenaltyScratch scratch;
  const std::vector<int32_t> prompt = {1};
  const std::vector<int32_t> output = {2, 2};
  for (int call = 0; call < 3; ++call) {
    std::vector<float> logits = {4.0f, 4.0f, 4.0f, 4.0f};
    apply_penalties(logits, prompt, output, params, scratch);
    EXPECT_FLOAT_EQ(logits[0], 4.0f) << "call " << call;
    EXPECT_FLOAT_EQ(logits[1], 2.0f) << "call " << call;
    EXPECT_FLOAT_EQ(logits[2], 0.0f) << "call " << call;  // 4 / 2 - 1 * 2
    EXPECT_FLOAT_EQ(logits[3], 4.0f) << "call " << call;
  }
  EXPECT_TRUE(
      std::all_of(scratch.seen.begin(), scratch.seen.end(), [](uint8_t s) { return s == 0; }));
  EXPECT_TRUE(std::all_of(scratch.output_counts.begin(), scratch.output_counts.end(),
                          [](int32_t c) { return c == 0; }));
}

TEST(ApplyPenaltiesTest, OutOfVocabularyIdThrows) {
  SamplingParams params;
  params.repetition_penalty = 1.5f;
  std::vector<float> logits(4, 0.0f);
  const std::vector<int32_t> prompt = {4};
  EXPECT_THROW(apply_penalties(logits, prompt, kNoTokens, params), Error);
  const std::vector<int32_t> negative = {-1};
  EXPECT_THROW(apply_penalties(logits, kNoTokens, negative, params), Error);
}

// A bad id after good ones (in the prompt or the output) must throw before anything is
// marked: stale scratch entries would penalise those tokens again in later calls.
TEST(ApplyPenaltiesTest, BadIdLeavesScratchAndLogitsClean) {
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.frequency_penalty = 1.0f;
  PenaltyScratch scratch;
  std::vector<float> warmup(4, 4.0f);
  apply_penalties(warmup, kNoTokens, kNoTokens, params, scratch);  // sizes the scratch
  const std::vector<int32_t> good = {0, 1};
  const std::vector<int32_t> bad_prompt = {0, 1, 9};
  const std::vector<int32_t> bad_output = {2, 3, 2, -1};
  std::vector<float> logits(4, 4.0f);
  EXPECT_THROW(apply_penalties(logits, bad_prompt, good, params, scratch), Error);
  EXPECT_THROW(apply_penalties(logits, good, bad_output, params, scratch), Error);
  EXPECT_EQ(logits, std::vector<float>(4, 4.0f));
  EXPECT_TRUE(scratch.touched_ids.empty());
  EXPECT_TRUE(
      std::all_of(scratch.seen.begin(), scratch.seen.end(), [](uint8_t s) { return s == 0; }));
  EXPECT_TRUE(std::all_of(scratch.output_counts.begin(), scratch.output_counts.end(),
                          [](int32_t c) { return c == 0; }));
  // And the next valid call penalises exactly its own tokens.
  std::vector<float> next(4, 4.0f);
  const std::vector<int32_t> output = {3};
  apply_penalties(next, kNoTokens, output, params, scratch);
  EXPECT_EQ(next, (std::vector<float>{4.0f, 4.0f, 4.0f, 4.0f / 2.0f - 1.0f}));
}

TEST(ApplyPenaltiesTest, NoPenaltiesLeaveLogitsUntouched) {
  std::vector<float> logits = {1.0f, -1.0f};
  const std::vector<int32_t> ids = {0, 1, 7};  // not even range-checked: nothing to do
  apply_penalties(logits, ids, ids, SamplingParams{});
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -1.0f}));
}

TEST(SamplerTest, PenaltiesChangeTheGreedyChoice) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 2.0f;
  Sampler sampler(params);
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f};
  const std::vector<int32_t> prompt = {0};
  EXPECT_EQ(sampler.sample(logits, kNoTokens, kNoTokens), 0);
  EXPECT_EQ(sampler.sample(logits, prompt, kNoTokens), 1);  // 3 / 2 = 1.5 < 2
}

// ---------------------------------------------------------------------------------------------
// Greedy

TEST(SamplerTest, GreedyPicksArgmax) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params);
  const std::vector<float> logits = {0.1f, 3.0f, -1.0f, 2.9f};
  EXPECT_EQ(sampler.sample(logits, kNoTokens, kNoTokens), 1);
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params);
  const std::vector<float> logits = {1.0f, 5.0f, -kInf, 5.0f, 5.0f};
  EXPECT_EQ(sampler.sample(logits, kNoTokens, kNoTokens), 1);
}

TEST(SamplerTest, TinyTemperatureIsGreedyAndIgnoresTruncation) {
  SamplingParams params;
  params.temperature = 1e-6f;
  params.top_k = 2;
  params.top_p = 0.1f;
  params.min_p = 0.9f;
  Sampler sampler(params);
  const std::vector<float> logits = random_logits(1000, 7);
  const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sampler.sample(logits, kNoTokens, kNoTokens), expected);
}

TEST(SamplerTest, GreedyOnLargeVocabulary) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params);
  const std::vector<float> logits = random_logits(151936, 11);
  const auto expected = std::max_element(logits.begin(), logits.end()) - logits.begin();
  EXPECT_EQ(sampler.sample(logits, kNoTokens, kNoTokens), expected);
}

TEST(SamplerTest, NonFiniteLogitsThrow) {
  for (float temperature : {0.0f, 1.0f}) {
    SamplingParams params = seeded(1);
    params.temperature = temperature;
    Sampler sampler(params);
    const std::vector<float> nan_logits = {1.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f};
    EXPECT_THROW(sampler.sample(nan_logits, kNoTokens, kNoTokens), Error) << temperature;
    const std::vector<float> masked = {-kInf, -kInf};
    EXPECT_THROW(sampler.sample(masked, kNoTokens, kNoTokens), Error) << temperature;
    EXPECT_THROW(sampler.sample(std::vector<float>{}, kNoTokens, kNoTokens), Error) << temperature;
  }
}

// ---------------------------------------------------------------------------------------------
// Temperature and the draw

TEST(SamplerTest, DistributionIsSoftmaxOfScaledLogits) {
  SamplingParams params = seeded(3);
  params.temperature = 0.5f;
  Sampler sampler(params);
  const std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  const std::vector<double> expected = softmax({0.0, 2.0, 4.0});
  const std::vector<TokenProbability> distribution =
      sampler.distribution(logits, kNoTokens, kNoTokens);
  ASSERT_EQ(distribution.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(distribution[i].token_id, static_cast<int32_t>(i));  // untruncated: id order
    EXPECT_NEAR(distribution[i].probability, expected[i], 1e-7);
  }
}

// Empirical frequencies over many seeded draws agree with softmax(logits / T) within 5 sigma,
// and a lower temperature moves mass to the most likely token.
TEST(SamplerTest, TemperatureEmpiricalFrequencies) {
  const std::vector<float> logits = {0.0f, 0.5f, 1.0f, 1.5f};
  const int draws = 40000;
  std::map<float, double> top_token_frequency;
  for (float temperature : {0.5f, 1.0f, 2.0f}) {
    SamplingParams params = seeded(1234);
    params.temperature = temperature;
    Sampler sampler(params);
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < draws; ++i) ++counts.at(sampler.sample(logits, kNoTokens, kNoTokens));
    std::vector<double> scaled;
    for (float x : logits) scaled.push_back(static_cast<double>(x) / temperature);
    const std::vector<double> expected = softmax(scaled);
    for (size_t t = 0; t < logits.size(); ++t) {
      const double frequency = static_cast<double>(counts[t]) / draws;
      const double sigma = std::sqrt(expected[t] * (1.0 - expected[t]) / draws);
      EXPECT_NEAR(frequency, expected[t], 5.0 * sigma) << "T=" << temperature << " token " << t;
    }
    top_token_frequency[temperature] = static_cast<double>(counts[3]) / draws;
  }
  EXPECT_GT(top_token_frequency[0.5f], top_token_frequency[1.0f] + 0.05);
  EXPECT_GT(top_token_frequency[1.0f], top_token_frequency[2.0f] + 0.05);
}

TEST(SamplerTest, MaskedTokensAreNeverDrawn) {
  Sampler sampler(seeded(5));
  const std::vector<float> logits = {-kInf, 0.0f, -kInf, 0.0f};
  for (int i = 0; i < 500; ++i) {
    const int32_t token = sampler.sample(logits, kNoTokens, kNoTokens);
    EXPECT_TRUE(token == 1 || token == 3) << token;
  }
}

// ---------------------------------------------------------------------------------------------
// Truncation

TEST(SamplerTest, TopKOneEqualsGreedy) {
  const std::vector<float> logits = {0.5f, 2.0f, 1.0f, 2.0f, -3.0f};  // tie at the top: 1 and 3
  SamplingParams greedy_params;
  greedy_params.temperature = 0.0f;
  Sampler greedy(greedy_params);
  SamplingParams top1_params = seeded(9);
  top1_params.top_k = 1;
  top1_params.temperature = 1.5f;
  Sampler top1(top1_params);
  const int32_t expected = greedy.sample(logits, kNoTokens, kNoTokens);
  EXPECT_EQ(expected, 1);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(top1.sample(logits, kNoTokens, kNoTokens), expected);

  const std::vector<float> large = random_logits(50000, 21);
  const int32_t expected_large = greedy.sample(large, kNoTokens, kNoTokens);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(top1.sample(large, kNoTokens, kNoTokens), expected_large);
}

TEST(SamplerTest, TopKKeepsTheKBestRenormalised) {
  SamplingParams params = seeded(2);
  params.top_k = 3;
  Sampler sampler(params);
  const std::vector<float> logits = {1.0f, 4.0f, 3.0f, 0.0f, 2.0f, 3.0f};  // ties 2 and 5 at 3.0
  const std::vector<TokenProbability> distribution =
      sampler.distribution(logits, kNoTokens, kNoTokens);
  ASSERT_EQ(distribution.size(), 3u);
  // Rank order; the tie between 2 and 5 goes to the lower id, and 5 is cut to keep exactly k.
  EXPECT_EQ(distribution[0].token_id, 1);
  EXPECT_EQ(distribution[1].token_id, 2);
  EXPECT_EQ(distribution[2].token_id, 5);
  const std::vector<double> expected = softmax({4.0, 3.0, 3.0});
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(distribution[i].probability, expected[i], 1e-7);

  params.top_k = 2;
  Sampler sampler2(params);
  EXPECT_EQ(kept_ids(sampler2.distribution(logits, kNoTokens, kNoTokens)),
            (std::set<int32_t>{1, 2}));
  params.top_k = 100;  // larger than the vocabulary: no truncation
  Sampler sampler100(params);
  EXPECT_EQ(sampler100.distribution(logits, kNoTokens, kNoTokens).size(), logits.size());
}

TEST(SamplerTest, TopKOnLargeVocabularyMatchesPartialSort) {
  SamplingParams params = seeded(4);
  params.top_k = 40;
  Sampler sampler(params);
  const std::vector<float> logits = random_logits(151936, 13);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + 40, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const std::vector<TokenProbability> distribution =
      sampler.distribution(logits, kNoTokens, kNoTokens);
  ASSERT_EQ(distribution.size(), 40u);
  for (size_t i = 0; i < 40; ++i) EXPECT_EQ(distribution[i].token_id, ids[i]);
  for (int i = 0; i < 100; ++i) {
    const int32_t token = sampler.sample(logits, kNoTokens, kNoTokens);
    EXPECT_TRUE(std::find(ids.begin(), ids.begin() + 40, token) != ids.begin() + 40);
  }
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  // Probabilities by id: 0 -> 0.3, 1 -> 0.05, 2 -> 0.5, 3 -> 0.15.
  const std::vector<float> logits = logits_of({0.3, 0.05, 0.5, 0.15});
  const std::vector<std::pair<float, std::set<int32_t>>> cases = {
      {0.45f, {2}},           // 0.5 alone reaches 0.45
      {0.75f, {2, 0}},        // 0.5 + 0.3
      {0.85f, {2, 0, 3}},     // 0.5 + 0.3 + 0.15
      {0.97f, {2, 0, 3, 1}},  // needs everything
  };
  for (const auto& [top_p, expected] : cases) {
    SamplingParams params = seeded(6);
    params.top_p = top_p;
    Sampler sampler(params);
    const std::vector<TokenProbability> distribution =
        sampler.distribution(logits, kNoTokens, kNoTokens);
    EXPECT_EQ(kept_ids(distribution), expected) << "top_p=" << top_p;
    double kept_mass = 0.0;
    for (const TokenProbability& t : distribution) kept_mass += t.probability;
    EXPECT_NEAR(kept_mass, 1.0, 1e-12);
    for (int i = 0; i < 200; ++i) {
      EXPECT_TRUE(expected.contains(sampler.sample(logits, kNoTokens, kNoTokens))) << top_p;
    }
  }
}

// A flat distribution needs thousands of tokens: exercises the lazily extended rank order.
TEST(SamplerTest, TopPOnFlatLargeVocabulary) {
  SamplingParams params = seeded(8);
  params.top_p = 0.5f;
  Sampler sampler(params);
  const std::vector<float> logits(10000, 0.0f);
  const std::vector<TokenProbability> distribution =
      sampler.distribution(logits, kNoTokens, kNoTokens);
  ASSERT_EQ(distribution.size(), 5000u);
  std::set<int32_t> expected;  // ties -> lower ids first
  for (int32_t id = 0; id < 5000; ++id) expected.insert(id);
  EXPECT_EQ(kept_ids(distribution), expected);
}

// Reference top-p by a full sort, to check the quickselect on non-flat, large vocabularies.
std::set<int32_t> reference_top_p(const std::vector<float>& logits, float top_p) {
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  double total = 0.0;
  for (float x : logits) total += std::exp(x - max);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  std::set<int32_t> kept;
  double cumulative = 0.0;
  for (int32_t id : ids) {
    kept.insert(id);
    cumulative += std::exp(logits[id] - max);
    if (cumulative >= top_p * total) break;
  }
  return kept;
}

TEST(SamplerTest, TopPMatchesFullSortReference) {
  for (uint64_t seed = 0; seed < 12; ++seed) {
    const size_t vocab = seed < 8 ? 37 + 50 * seed : 100000;  // small ranges and the partition path
    const std::vector<float> logits = random_logits(vocab, 100 + seed);
    for (float top_p : {0.3f, 0.9f, 0.99f}) {
      SamplingParams params = seeded(seed);
      params.top_p = top_p;
      Sampler sampler(params);
      EXPECT_EQ(kept_ids(sampler.distribution(logits, kNoTokens, kNoTokens)),
                reference_top_p(logits, top_p))
          << "vocab " << vocab << " top_p " << top_p;
    }
  }
}

TEST(SamplerTest, LargeTopKUsesSelectionAndKeepsRankOrder) {
  SamplingParams params = seeded(4);
  params.top_k = 3000;  // above the bounded-heap limit
  Sampler sampler(params);
  const std::vector<float> logits = random_logits(151936, 29);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + 3000, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const std::vector<TokenProbability> distribution =
      sampler.distribution(logits, kNoTokens, kNoTokens);
  ASSERT_EQ(distribution.size(), 3000u);
  for (size_t i = 0; i < distribution.size(); ++i) EXPECT_EQ(distribution[i].token_id, ids[i]);
}

TEST(SamplerTest, TopPAfterTopKRenormalises) {
  // top-k = 2 leaves {2: 0.5, 0: 0.3} -> renormalised 0.625 / 0.375; top_p = 0.6 keeps only 2.
  const std::vector<float> logits = logits_of({0.3, 0.05, 0.5, 0.15});
  SamplingParams params = seeded(6);
  params.top_k = 2;
  params.top_p = 0.6f;
  Sampler sampler(params);
  EXPECT_EQ(kept_ids(sampler.distribution(logits, kNoTokens, kNoTokens)), (std::set<int32_t>{2}));
}

TEST(SamplerTest, MinPIsRelativeToTheMostLikelyToken) {
  const std::vector<float> logits = logits_of({0.3, 0.05, 0.5, 0.15});
  const std::vector<std::pair<float, std::set<int32_t>>> cases = {
      {0.2f, {0, 2, 3}},  // threshold 0.1
      {0.5f, {0, 2}},     // threshold 0.25
      {0.9f, {2}},        // threshold 0.45
      {0.05f, {0, 1, 2, 3}},
  };
  for (const auto& [min_p, expected] : cases) {
    SamplingParams params = seeded(10);
    params.min_p = min_p;
    Sampler sampler(params);
    EXPECT_EQ(kept_ids(sampler.distribution(logits, kNoTokens, kNoTokens)), expected) << min_p;
  }
  // Relative to the max after temperature: T = 2 flattens 0.05 vs 0.5 to ratio sqrt(0.1) ~ 0.316.
  SamplingParams params = seeded(10);
  params.min_p = 0.3f;
  params.temperature = 2.0f;
  Sampler sampler(params);
  EXPECT_EQ(kept_ids(sampler.distribution(logits, kNoTokens, kNoTokens)),
            (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(SamplerTest, MinPRunsBeforeTopPAsInVllmV1) {
  // min_p = 0.5 keeps {2: 0.5, 0: 0.3} -> renormalised 0.625 / 0.375; top_p = 0.6 then keeps {2}.
  // (top-p first would keep {2, 0}: 0.5 < 0.6 on the full distribution.)
  const std::vector<float> logits = logits_of({0.3, 0.05, 0.5, 0.15});
  SamplingParams params = seeded(12);
  params.min_p = 0.5f;
  params.top_p = 0.6f;
  Sampler sampler(params);
  const std::vector<TokenProbability> distribution =
      sampler.distribution(logits, kNoTokens, kNoTokens);
  ASSERT_EQ(distribution.size(), 1u);
  EXPECT_EQ(distribution[0].token_id, 2);
  EXPECT_DOUBLE_EQ(distribution[0].probability, 1.0);
}

// ---------------------------------------------------------------------------------------------
// Seeds

std::vector<int32_t> draw_sequence(const SamplingParams& params, const std::vector<float>& logits,
                                   int length) {
  Sampler sampler(params);
  std::vector<int32_t> output;
  for (int i = 0; i < length; ++i) output.push_back(sampler.sample(logits, kNoTokens, output));
  return output;
}

TEST(SamplerTest, SameSeedSameSequenceDifferentSeedDifferent) {
  const std::vector<float> logits = random_logits(32000, 17);
  SamplingParams params = seeded(42);
  params.temperature = 1.3f;
  params.top_p = 0.95f;
  params.frequency_penalty = 0.3f;
  const std::vector<int32_t> first = draw_sequence(params, logits, 100);
  EXPECT_EQ(draw_sequence(params, logits, 100), first);
  params.seed = 43;
  EXPECT_NE(draw_sequence(params, logits, 100), first);
}

TEST(SamplerTest, UnseededSamplersDiffer) {
  const std::vector<float> logits(1000, 0.0f);
  EXPECT_NE(draw_sequence(SamplingParams{}, logits, 20),
            draw_sequence(SamplingParams{}, logits, 20));
}

// Golden draws from a flat distribution (every weight is exactly 1, so no libm rounding is
// involved): pins the RNG, the uniform construction and the draw order across platforms.
TEST(SamplerTest, SeededDrawsAreStableAcrossPlatforms) {
  const std::vector<float> logits(10, 0.0f);
  Sampler sampler(seeded(2024));
  std::vector<int32_t> drawn;
  for (int i = 0; i < 16; ++i) drawn.push_back(sampler.sample(logits, kNoTokens, kNoTokens));
  // Reference: floor(10 * ((mt19937_64(2024)() >> 11) * 2^-53)) for 16 consecutive outputs.
  std::mt19937_64 reference(2024);
  std::vector<int32_t> expected;
  for (int i = 0; i < 16; ++i) {
    expected.push_back(
        static_cast<int32_t>(10.0 * (static_cast<double>(reference() >> 11) * 0x1.0p-53)));
  }
  EXPECT_EQ(drawn, expected);
  EXPECT_EQ(drawn, (std::vector<int32_t>{6, 7, 2, 3, 0, 1, 9, 5, 2, 5, 5, 6, 9, 7, 0, 1}));
}

// ---------------------------------------------------------------------------------------------
// Logprobs

TEST(SamplerTest, LogprobsMatchHandComputedLogSoftmax) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.logprobs = 2;
  Sampler sampler(params);
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.0f};
  const double log_normalizer =
      std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(0.0));
  SampleResult extra;
  EXPECT_EQ(sampler.sample(logits, kNoTokens, kNoTokens, &extra), 2);
  EXPECT_NEAR(extra.logprob, 3.0 - log_normalizer, 1e-6);
  ASSERT_EQ(extra.top.size(), 2u);
  EXPECT_EQ(extra.top[0].first, 2);
  EXPECT_NEAR(extra.top[0].second, 3.0 - log_normalizer, 1e-6);
  EXPECT_EQ(extra.top[1].first, 1);
  EXPECT_NEAR(extra.top[1].second, 2.0 - log_normalizer, 1e-6);
}

TEST(SamplerTest, LogprobsOverWholeVocabularySumToOne) {
  SamplingParams params = seeded(14);
  params.logprobs = 20;
  Sampler sampler(params);
  const std::vector<float> logits = random_logits(20, 19);
  SampleResult extra;
  const int32_t token = sampler.sample(logits, kNoTokens, kNoTokens, &extra);
  ASSERT_EQ(extra.top.size(), 20u);
  double total = 0.0;
  for (size_t i = 0; i < extra.top.size(); ++i) {
    total += std::exp(static_cast<double>(extra.top[i].second));
    if (i > 0) {
      EXPECT_GE(extra.top[i - 1].second, extra.top[i].second);
    }
    if (extra.top[i].first == token) {
      EXPECT_FLOAT_EQ(extra.top[i].second, extra.logprob);
    }
  }
  EXPECT_NEAR(total, 1.0, 1e-5);
}

// vLLM's default: logprobs of the raw model distribution, regardless of penalties, temperature
// and truncation.
TEST(SamplerTest, LogprobsIgnoreProcessing) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.0f};
  const std::vector<double> raw = softmax({1.0, 2.0, 3.0, 0.0});
  SamplingParams params = seeded(15);
  params.temperature = 0.3f;
  params.top_k = 2;
  params.repetition_penalty = 1.8f;
  params.presence_penalty = 1.0f;
  params.logprobs = 0;
  Sampler sampler(params);
  const std::vector<int32_t> output = {2, 1};
  for (int i = 0; i < 20; ++i) {
    SampleResult extra;
    const int32_t token = sampler.sample(logits, kNoTokens, output, &extra);
    EXPECT_TRUE(extra.top.empty());
    EXPECT_NEAR(extra.logprob, std::log(raw[token]), 1e-6);
  }
}

TEST(SamplerTest, TopLogprobsOnLargeVocabulary) {
  SamplingParams params = seeded(16);
  params.logprobs = 5;
  Sampler sampler(params);
  const std::vector<float> logits = random_logits(151936, 23);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + 5, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  SampleResult extra;
  sampler.sample(logits, kNoTokens, kNoTokens, &extra);
  ASSERT_EQ(extra.top.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(extra.top[i].first, ids[i]);
  EXPECT_NEAR(extra.top[0].second - extra.top[1].second, logits[ids[0]] - logits[ids[1]], 1e-4);
}

}  // namespace
}  // namespace tq
