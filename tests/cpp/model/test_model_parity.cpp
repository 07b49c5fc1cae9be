// Logits and greedy tokens of tiny random Qwen3 / Qwen2 / Llama checkpoints equal those of
// Hugging Face transformers (tests/data/tiny/expected.json, made by tools/gen_tiny_models.py),
// loaded from safetensors (f32, bf16, sharded) and from GGUF (f32, q8_0) alike.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <cctype>

#include "engine/generator.h"
#include "errors/error.h"
#include "kv/block_pool.h"
#include "model/loader.h"
#include "model/transformer.h"

namespace tq {
namespace {

const std::string kTinyDir = std::string(TQ_SOURCE_DIR) + "/tests/data/tiny";

const nlohmann::json& expected() {
  static const nlohmann::json j = [] {
    std::ifstream in(kTinyDir + "/expected.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

struct Checkpoint {
  std::string variant;  // key in expected.json "variants"
  std::string path;     // folder or GGUF file
};

std::vector<Checkpoint> all_checkpoints() {
  std::vector<Checkpoint> out;
  for (const auto& [name, v] : expected()["variants"].items()) {
    for (const char* key : {"hf_dirs", "ggufs"})
      for (const auto& file : v.value(key, nlohmann::json::array())) out.push_back({name, kTinyDir + "/" + file.get<std::string>()});
  }
  return out;
}

// Runs the prompt through a fresh cache in chunks of `chunk` tokens and returns the logits of
// every position: [T][vocab].
std::vector<std::vector<float>> prompt_logits(Transformer& model, const ModelConfig& c, const std::vector<TokenId>& ids,
                                              int chunk, int block_size, KvDtype dtype = KvDtype::F32) {
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim, block_size, dtype, dtype}, 512 / block_size + 1);
  BlockPool pool(cache);
  BlockTable table;
  EXPECT_TRUE(pool.allocate(table, static_cast<int>(ids.size())));
  std::vector<std::vector<float>> rows;
  std::vector<float> logits;
  for (size_t start = 0; start < ids.size(); start += chunk) {
    ForwardBatch batch;
    for (size_t i = start; i < std::min(ids.size(), start + chunk); ++i) batch.add(ids[i], static_cast<int32_t>(i), &table, true);
    model.forward(batch, cache, logits);
    for (int r = 0; r < batch.size(); ++r)
      rows.emplace_back(logits.begin() + static_cast<size_t>(r) * c.vocab_size,
                        logits.begin() + static_cast<size_t>(r + 1) * c.vocab_size);
  }
  pool.free(table);
  return rows;
}

class TinyModelParity : public ::testing::TestWithParam<Checkpoint> {};

TEST_P(TinyModelParity, LogitsAndGreedyTokensMatchTransformers) {
  const Checkpoint& cp = GetParam();
  LoadedModel m = load_model(cp.path, {.dequantize_weights = true});  // the exact float maths transformers runs
  Transformer model(m.config, m.weights);
  for (const auto& kase : expected()["variants"][cp.variant]["cases"]) {
    const std::vector<TokenId> prompt = kase["prompt_ids"].get<std::vector<TokenId>>();
    const auto ref = kase["logits"].get<std::vector<std::vector<double>>>();
    const auto got = prompt_logits(model, m.config, prompt, static_cast<int>(prompt.size()), 16);
    ASSERT_EQ(got.size(), ref.size());
    for (size_t t = 0; t < ref.size(); ++t) {
      ASSERT_EQ(got[t].size(), ref[t].size());
      double max_ref = 0, max_diff = 0;
      for (size_t i = 0; i < ref[t].size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(ref[t][i]));
        max_diff = std::max(max_diff, std::fabs(got[t][i] - ref[t][i]));
      }
      // fp32 accumulation against a float64 reference on the same stored weights.
      EXPECT_LE(max_diff, 1e-4 * max_ref) << cp.path << " position " << t;
    }
    KvCache cache({m.config.num_layers, m.config.num_kv_heads, m.config.head_dim, 16, KvDtype::F32, KvDtype::F32}, 8);
    Generator gen(model, cache, m.tokenizer.get(), m.stop_ids);
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = static_cast<int>(kase["greedy_ids"].size());
    greedy.ignore_eos = true;
    EXPECT_EQ(gen.generate(prompt, greedy).ids, kase["greedy_ids"].get<std::vector<TokenId>>()) << cp.path;
  }
}

// The logits of a prompt do not depend on how it is chunked or on the block size.
TEST_P(TinyModelParity, ChunkingAndBlockSizeDoNotChangeLogits) {
  const Checkpoint& cp = GetParam();
  LoadedModel m = load_model(cp.path, {.dequantize_weights = true});
  Transformer model(m.config, m.weights);
  const auto prompt = expected()["variants"][cp.variant]["cases"].back()["prompt_ids"].get<std::vector<TokenId>>();
  const auto whole = prompt_logits(model, m.config, prompt, static_cast<int>(prompt.size()), 16);
  for (auto [chunk, block] : {std::pair{1, 16}, std::pair{5, 1}, std::pair{7, 128}}) {
    const auto other = prompt_logits(model, m.config, prompt, chunk, block);
    for (size_t t = 0; t < whole.size(); ++t)
      for (size_t i = 0; i < whole[t].size(); ++i)
        ASSERT_NEAR(other[t][i], whole[t][i], 2e-5f * (1 + std::fabs(whole[t][i]))) << "chunk " << chunk << " block " << block;
  }
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, TinyModelParity, ::testing::ValuesIn(all_checkpoints()),
                         [](const ::testing::TestParamInfo<Checkpoint>& info) {
                           std::string name = info.param.path.substr(info.param.path.rfind('/') + 1);
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(TinyModelTokenizer, MatchesTransformersTokenizer) {
  const auto& tok = expected()["tokenizer"];
  LoadedModel m = load_model(kTinyDir + "/qwen3-f32", {.with_weights = false});
  ASSERT_TRUE(m.tokenizer);
  for (const auto& kase : tok["cases"])
    EXPECT_EQ(m.tokenizer->encode(kase["text"].get<std::string>(), true), kase["ids"].get<std::vector<TokenId>>())
        << kase["text"];
  LoadedModel g = load_model(kTinyDir + "/qwen3-f32.gguf", {.with_weights = false});
  for (const auto& kase : tok["cases"])
    EXPECT_EQ(g.tokenizer->encode(kase["text"].get<std::string>(), true), kase["ids"].get<std::vector<TokenId>>())
        << kase["text"];
}

TEST(ModelLoading, MissingTensorAndBadConfigAreNamed) {
  EXPECT_THROW(
      {
        try {
          load_model(kTinyDir + "/does-not-exist");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("does-not-exist"), std::string::npos);
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace tq

namespace tq {
namespace {

// Q8_0 weights kept in their blocks (8-bit activations, as llama.cpp): close to the exact
// reference, with the error an 8-bit activation grid implies, and the same argmax everywhere.
TEST(QuantizedWeights, Q8_0GgufStaysCloseToTransformers) {
  LoadedModel m = load_model(kTinyDir + "/qwen3-q8_0.gguf", {.dequantize_weights = false});
  ASSERT_EQ(m.weights.layers[0].wq.dtype, DType::Q8_0);
  ASSERT_TRUE(m.weights.layers[0].wq.w.empty());
  Transformer model(m.config, m.weights);
  for (const auto& kase : expected()["variants"]["qwen3-q8_0"]["cases"]) {
    const auto prompt = kase["prompt_ids"].get<std::vector<TokenId>>();
    const auto ref = kase["logits"].get<std::vector<std::vector<double>>>();
    const auto got = prompt_logits(model, m.config, prompt, static_cast<int>(prompt.size()), 16);
    for (size_t t = 0; t < ref.size(); ++t) {
      double max_ref = 0, max_diff = 0;
      for (size_t i = 0; i < ref[t].size(); ++i) {
        max_ref = std::max(max_ref, std::fabs(ref[t][i]));
        max_diff = std::max(max_diff, std::fabs(got[t][i] - ref[t][i]));
      }
      EXPECT_LE(max_diff, 5e-2 * max_ref) << "position " << t;
      EXPECT_EQ(std::max_element(got[t].begin(), got[t].end()) - got[t].begin(),
                std::max_element(ref[t].begin(), ref[t].end()) - ref[t].begin())
          << "position " << t;
    }
  }
}

}  // namespace
}  // namespace tq
