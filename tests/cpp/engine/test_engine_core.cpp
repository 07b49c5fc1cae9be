// The serving engine (engine/engine_core.h, engine/scheduler.h, kv/block_pool.h) on a real tiny
// model (stories260K): it reproduces llama2.c's greedy output; with many requests, small token
// budgets (chunked prefill mixed with decode), preemption and prefix-cache hits every request's
// output equals the same request run alone; blocks all come back; aborts free at once; prompt
// logprobs equal the log-softmax of a plain forward pass.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "support/batch_invariance_support.h"
#include "engine/engine_core.h"
#include "engine/generator.h"
#include "errors/error.h"
#include "model/loader.h"
#include "support/test_tokenizer_support.h"

namespace tq {
namespace {

struct TinyEngine {
  LoadedModel model = load_model(test::testdata("stories260K/stories260K.gguf"));
  Transformer transformer{model.config, model.weights};

  std::unique_ptr<KvCache> make_cache(int blocks, KvDtype dtype = KvDtype::F32) {
    const ModelConfig& c = model.config;
    return std::make_unique<KvCache>(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim, 16, dtype, dtype}, blocks);
  }
};

TinyEngine& tiny() {
  static TinyEngine e;
  return e;
}

struct RunResult {
  std::vector<TokenId> ids;
  std::string text;
  FinishReason finish = FinishReason::none;
  std::vector<SampleResult> prompt_logprobs;
};

// Runs every request to completion; returns results by request id.
std::map<uint64_t, RunResult> run_all(EngineCore& engine, std::vector<std::unique_ptr<Request>> requests,
                                      int max_steps = 100000) {
  std::map<uint64_t, RunResult> results;
  for (auto& r : requests) engine.add_request(std::move(r));
  for (int s = 0; s < max_steps && engine.has_work(); ++s) {
    for (RequestOutput& o : engine.step()) {
      RunResult& res = results[o.id];
      res.ids.insert(res.ids.end(), o.new_ids.begin(), o.new_ids.end());
      res.text += o.new_text;
      if (!o.prompt_logprobs.empty()) res.prompt_logprobs = o.prompt_logprobs;
      if (o.finish != FinishReason::none) res.finish = o.finish;
    }
    engine.check_consistency();
  }
  EXPECT_FALSE(engine.has_work()) << "requests still running after " << max_steps << " steps";
  return results;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = max_tokens;
  return p;
}

std::vector<TokenId> encode(const std::string& text) {
  return tiny().model.tokenizer->encode_prompt(text, true);
}

EngineConfig config(int budget, int max_seqs, bool prefix = true) {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = max_seqs;
  c.enable_prefix_caching = prefix;
  return c;
}

TEST(EngineCore, ReproducesLlama2cGreedyOutput) {
  TQ_REQUIRE_TESTDATA();
  std::ifstream in(test::testdata("stories260K/llama2c_expected_greedy_t0_n200.txt"));
  std::stringstream expected;
  expected << in.rdbuf();
  auto cache = tiny().make_cache(64);
  EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, config(64, 8));
  std::vector<std::unique_ptr<Request>> reqs;
  const TokenId bos = *tiny().model.tokenizer->special().bos;
  reqs.push_back(std::make_unique<Request>(1, std::vector<TokenId>{bos}, greedy(200)));
  auto results = run_all(engine, std::move(reqs));
  std::string text = results[1].text;
  if (!text.empty() && text[0] == ' ') text.erase(0, 1);  // llama2.c strips the first piece's space
  EXPECT_EQ(text, expected.str());
  EXPECT_EQ(results[1].finish, FinishReason::length);
  EXPECT_EQ(engine.stats().blocks_in_use, 0);
}

// Prompts of assorted lengths with shared prefixes (prefix-cache hits) and distinct tails.
std::vector<std::vector<TokenId>> assorted_prompts(int n) {
  const std::vector<std::string> starts = {"Once upon a time, there was a little girl named Lily.",
                                           "The cat sat on the mat and looked at the big red ball",
                                           "Tom and Sue went to the park. They saw a dog"};
  std::vector<std::vector<TokenId>> out;
  for (int i = 0; i < n; ++i) {
    std::string text = starts[i % starts.size()];
    for (int k = 0; k < i % 5; ++k) text += " She was happy and she played all day long.";
    text += i % 2 ? " One day" : " Then";
    out.push_back(encode(text));
  }
  return out;
}

// Each request alone, in a fresh engine with a roomy pool: the reference outputs.
std::map<uint64_t, RunResult> run_alone(const std::vector<std::vector<TokenId>>& prompts,
                                        const std::vector<SamplingParams>& params) {
  std::map<uint64_t, RunResult> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto cache = tiny().make_cache(128);
    EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids,
                      config(4096, 1, false));
    std::vector<std::unique_ptr<Request>> one;
    one.push_back(std::make_unique<Request>(i, prompts[i], params[i]));
    out[i] = run_all(engine, std::move(one))[i];
  }
  return out;
}

void expect_same_as_alone(int budget, int max_seqs, int blocks, bool expect_preemption, bool expect_hits = true) {
  const auto prompts = assorted_prompts(24);
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams p = greedy(20 + int(i % 7) * 9);
    if (i % 3 == 1) {  // seeded sampling must also resume where it was
      p.temperature = 0.9f;
      p.top_p = 0.95f;
      p.seed = 1000 + i;
    }
    params.push_back(p);
  }
  const auto alone = run_alone(prompts, params);
  auto cache = tiny().make_cache(blocks);
  EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids,
                    config(budget, max_seqs));
  std::vector<std::unique_ptr<Request>> reqs;
  for (size_t i = 0; i < prompts.size(); ++i) reqs.push_back(std::make_unique<Request>(i, prompts[i], params[i]));
  const auto together = run_all(engine, std::move(reqs));
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(together.at(i).ids, alone.at(i).ids);
    EXPECT_EQ(together.at(i).text, alone.at(i).text);
    EXPECT_EQ(together.at(i).finish, alone.at(i).finish);
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.blocks_in_use, 0);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
  if (expect_hits) EXPECT_GT(s.prefix.hits, 0u);
  if (expect_preemption) EXPECT_GT(s.preemptions, 0u);
}

// The attention's work items are (part or block of tokens, range of KV heads) whose width follows
// the thread count (model/layer_blocks.cpp heads_per_item): 16 sequences in one batch give
// ranges of 4, 2 and 1 heads at 1, 3 and 8 threads. The logits are the same bits at each, in an
// f32 and a TurboQuant cache, for the batch's prefill and for a decode step after it.
TEST(EngineCore, LogitsDoNotDependOnThreadCount) {
  TQ_REQUIRE_TESTDATA();
  TinyEngine& e = tiny();
  const auto prompts = assorted_prompts(16);
  const int vocab = e.model.config.vocab_size, saved_threads = omp_get_max_threads();
  for (KvDtype dtype : {KvDtype::F32, KvDtype::TQ4}) {
    SCOPED_TRACE(std::string(kv_dtype_name(dtype)));
    std::vector<std::vector<float>> runs;
    for (int threads : {1, 3, 8}) {
      omp_set_num_threads(threads);
      auto cache = e.make_cache(128, dtype);
      BlockPool pool(*cache);
      std::vector<BlockTable> tables(prompts.size());
      ForwardBatch prefill, decode;
      for (size_t s = 0; s < prompts.size(); ++s) {
        ASSERT_TRUE(pool.allocate(tables[s], int(prompts[s].size()) + 1));
        for (size_t p = 0; p < prompts[s].size(); ++p) prefill.add(prompts[s][p], int(p), &tables[s], true);
        decode.add(prompts[s][0], int(prompts[s].size()), &tables[s], true);
      }
      std::vector<float> logits, all;
      e.transformer.forward(prefill, *cache, logits);
      all = logits;
      e.transformer.forward(decode, *cache, logits);
      all.insert(all.end(), logits.begin(), logits.end());
      runs.push_back(all);
      for (auto& t : tables) pool.free(t);
    }
    omp_set_num_threads(saved_threads);
    ASSERT_EQ(runs[0].size(), runs[1].size());
    EXPECT_GT(runs[0].size(), size_t(16) * vocab);
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[1].data(), runs[0].size() * sizeof(float))) << "1 against 3 threads";
    EXPECT_EQ(0, std::memcmp(runs[0].data(), runs[2].data(), runs[0].size() * sizeof(float))) << "1 against 8 threads";
  }
}

// All 24 are admitted in the first step, before any block is cached: no prefix hits here.
TEST(EngineCore, BatchedOutputsEqualEachRequestAlone) {
  TQ_REQUIRE_TESTDATA(); expect_same_as_alone(2048, 64, 256, false, false); }

// Batch invariance at the root: a token's logits are the same bits whether it is computed alone
// or in a batch with other sequences' tokens (prefill chunks and decode tokens).
TEST(EngineCore, LogitsDoNotDependOnBatchComposition) {
  TQ_REQUIRE_TESTDATA();
  TinyEngine& e = tiny();
  auto cache = e.make_cache(64);
  test::expect_logits_independent_of_batch(e.transformer, *cache, assorted_prompts(4), e.model.config.vocab_size, 3, 1);
}

TEST(EngineCore, ChunkedPrefillMixedWithDecodeChangesNothing) {
  TQ_REQUIRE_TESTDATA(); expect_same_as_alone(7, 16, 256, false); }

TEST(EngineCore, RecomputePreemptionResumesWithTheSameOutput) {
  TQ_REQUIRE_TESTDATA();
  // 12 blocks of 16 tokens for 24 requests of up to ~120 tokens: preemption is unavoidable.
  expect_same_as_alone(64, 24, 12, true);
}

TEST(EngineCore, PrefixCacheHitsAreCountedAndReused) {
  TQ_REQUIRE_TESTDATA();
  auto cache = tiny().make_cache(64);
  EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, config(256, 4));
  const std::vector<TokenId> prompt = assorted_prompts(5)[3];  // several full blocks
  ASSERT_GE(prompt.size(), 48u);
  std::vector<std::unique_ptr<Request>> first;
  first.push_back(std::make_unique<Request>(1, prompt, greedy(5)));
  const auto a = run_all(engine, std::move(first));
  EXPECT_EQ(engine.stats().prefix.hits, 0u);
  std::vector<std::unique_ptr<Request>> second;
  second.push_back(std::make_unique<Request>(2, prompt, greedy(5)));
  const auto b = run_all(engine, std::move(second));
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.prefix.queries, 2 * prompt.size());
  EXPECT_EQ(s.prefix.hits, (prompt.size() - 1) / 16 * 16);
  EXPECT_EQ(a.at(1).ids, b.at(2).ids);
  EXPECT_EQ(s.blocks_in_use, 0);
}

TEST(EngineCore, AbortFreesBlocksAtOnce) {
  TQ_REQUIRE_TESTDATA();
  auto cache = tiny().make_cache(64);
  EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, config(64, 4));
  engine.add_request(std::make_unique<Request>(7, assorted_prompts(1)[0], greedy(500)));
  for (int i = 0; i < 5; ++i) engine.step();
  EXPECT_GT(engine.stats().blocks_in_use, 0);
  EXPECT_TRUE(engine.abort_request(7));
  EXPECT_EQ(engine.stats().blocks_in_use, 0);
  EXPECT_FALSE(engine.abort_request(7));
  EXPECT_FALSE(engine.has_work());
  engine.check_consistency();
}

TEST(EngineCore, BadRequestsAreRejectedWithTheirProblem) {
  TQ_REQUIRE_TESTDATA();
  auto cache = tiny().make_cache(8);  // 128 tokens
  EngineConfig cfg = config(64, 4);
  cfg.max_model_len = 100;
  EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, cfg);
  const auto message = [&](std::vector<TokenId> prompt, uint64_t id = 1) {
    try {
      engine.add_request(std::make_unique<Request>(id, std::move(prompt), greedy(4)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({}).find("empty"), std::string::npos);
  EXPECT_NE(message({1, 5000}).find("5000"), std::string::npos);
  const std::string too_long = message(std::vector<TokenId>(100, 5));
  EXPECT_NE(too_long.find("100 tokens"), std::string::npos) << too_long;
  EXPECT_FALSE(engine.has_work());
  EXPECT_EQ(message({1, 5, 6}, 3), "");
  EXPECT_NE(message({1, 5, 6}, 3).find("already"), std::string::npos);
  EngineConfig too_big = cfg;
  too_big.max_model_len = 129;
  EXPECT_THROW(EngineCore(tiny().transformer, *cache, nullptr, {}, too_big), Error);
}

TEST(EngineCore, PromptLogprobsEqualAPlainForwardPass) {
  TQ_REQUIRE_TESTDATA();
  const std::vector<TokenId> prompt = assorted_prompts(3)[2];
  auto cache = tiny().make_cache(32);
  EngineCore engine(tiny().transformer, *cache, tiny().model.tokenizer.get(), tiny().model.stop_ids, config(9, 4));
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(std::make_unique<Request>(1, prompt, greedy(3), 2));
  const auto res = run_all(engine, std::move(reqs));
  const auto& lp = res.at(1).prompt_logprobs;
  ASSERT_EQ(lp.size(), prompt.size());

  // Reference: one forward over the whole prompt, log-softmax in double.
  auto ref_cache = tiny().make_cache(32);
  BlockPool ref_pool(*ref_cache);
  BlockTable table;
  ASSERT_TRUE(ref_pool.allocate(table, int(prompt.size())));
  ForwardBatch batch;
  for (size_t i = 0; i < prompt.size(); ++i) batch.add(prompt[i], int(i), &table, true);
  std::vector<float> logits;
  tiny().transformer.forward(batch, *ref_cache, logits);
  const int vocab = tiny().model.config.vocab_size;
  for (size_t i = 1; i < prompt.size(); ++i) {
    const float* row = logits.data() + (i - 1) * vocab;
    double mx = row[0], sum = 0;
    for (int v = 0; v < vocab; ++v) mx = std::max(mx, double(row[v]));
    for (int v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
    const double expect = row[prompt[i]] - mx - std::log(sum);
    EXPECT_NEAR(lp[i].logprob, expect, 1e-4) << "position " << i;
    ASSERT_EQ(lp[i].top.size(), 2u);
    EXPECT_GE(lp[i].top[0].second, lp[i].top[1].second);
  }
  ref_pool.free(table);
}

// Generator (engine/generator.h): one request at a time over EngineCore, prefix cache kept
// across calls (a chat's turns).
TEST(Generator, ALaterCallSharingAPrefixGivesWhatAFreshGeneratorGives) {
  TQ_REQUIRE_TESTDATA();
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 12;
  std::vector<TokenId> turn1 = {1};
  for (int i = 0; i < 40; ++i) turn1.push_back(TokenId(20 + (i * 37) % 400));
  auto cache = tiny().make_cache(32);
  Generator g(tiny().transformer, *cache, nullptr, {2}, 0, 7);
  const GenerationOutput first = g.generate(turn1, p);
  std::vector<TokenId> turn2 = turn1;  // the conversation so far, then more
  turn2.insert(turn2.end(), first.ids.begin(), first.ids.end());
  for (int i = 0; i < 9; ++i) turn2.push_back(TokenId(30 + i));
  const GenerationOutput second = g.generate(turn2, p);
  EXPECT_GE(g.stats().prefix.hits, 32u) << "the second call must reuse the first's blocks";
  EXPECT_EQ(g.stats().blocks_in_use, 0);

  auto fresh_cache = tiny().make_cache(32);
  Generator fresh(tiny().transformer, *fresh_cache, nullptr, {2}, 0, 7);
  const GenerationOutput expected = fresh.generate(turn2, p);
  EXPECT_EQ(fresh.stats().prefix.hits, 0u);
  EXPECT_EQ(second.ids, expected.ids);
  EXPECT_EQ(second.finish_reason, expected.finish_reason);
}

TEST(Generator, APromptThatFillsTheContextIsRefusedAndTheGeneratorStaysUsable) {
  TQ_REQUIRE_TESTDATA();
  auto cache = tiny().make_cache(32);
  Generator g(tiny().transformer, *cache, nullptr, {2}, 64);
  EXPECT_EQ(g.context_length(), 64);
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 100;
  const std::vector<TokenId> full(64, 5);
  try {
    g.generate(full, p);
    ADD_FAILURE() << "a 64-token prompt in a 64-token context was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the prompt has 64 tokens but the context length is 64"), std::string::npos)
        << e.what();
  }
  const GenerationOutput out = g.generate(std::vector<TokenId>(60, 5), p);  // room for 4
  EXPECT_EQ(out.ids.size(), 4u);
  EXPECT_EQ(out.finish_reason, "length");
  EXPECT_EQ(g.stats().blocks_in_use, 0);
}

}  // namespace
}  // namespace tq
