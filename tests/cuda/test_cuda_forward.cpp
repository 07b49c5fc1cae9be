// The forward pass on the GPU against the CPU's and against transformers (tests/data/tiny's
// expected.json): logits within 1e-3 relative of the CPU path for every tiny model and stories260K
// in f32 and f16 KV, greedy tokens equal, and a sequence's greedy output the same alone or batched.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "cuda_test_support.h"
#include "engine/generator.h"
#include "kv/block_pool.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "support/testdata_support.h"

namespace tq {
namespace {

std::string tiny_dir() { return test::source_dir() + "/tests/data/tiny"; }

std::vector<std::string> model_files() {
  std::vector<std::string> out;
  for (const char* f : {"llama-f32.gguf", "qwen2-f32.gguf", "qwen3-f32.gguf", "qwen3-q8_0.gguf"}) out.push_back(tiny_dir() + "/" + f);
  return out;
}

// Logits of every position of `ids`, run in chunks of `chunk` tokens: [T * vocab].
std::vector<float> prompt_logits(Transformer& model, const ModelConfig& c, const std::vector<TokenId>& ids, int chunk,
                                 KvDtype dtype) {
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim, 16, dtype, dtype}, 512 / 16 + 1);
  BlockPool pool(cache);
  BlockTable table;
  EXPECT_TRUE(pool.allocate(table, static_cast<int>(ids.size())));
  std::vector<float> all, logits;
  for (size_t start = 0; start < ids.size(); start += chunk) {
    ForwardBatch batch;
    for (size_t i = start; i < std::min(ids.size(), start + chunk); ++i) batch.add(ids[i], static_cast<int32_t>(i), &table, true);
    model.forward(batch, cache, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  pool.free(table);
  return all;
}

std::vector<TokenId> some_prompt(int vocab, int n) {
  std::vector<TokenId> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<TokenId>((i * 7919 + 13) % vocab);
  return ids;
}

TEST(CudaForward, LogitsWithinOneThousandthOfCpu) {
  TQ_REQUIRE_CUDA();
  std::vector<std::string> files = model_files();
  if (test::have_testdata()) files.push_back(test::testdata("stories260K/stories260K.gguf"));
  for (const std::string& path : files) {
    LoadedModel m = load_model(path, {.dequantize_weights = true});
    Transformer cpu(m.config, m.weights), gpu(m.config, m.weights);
    gpu.use_device(ComputeDevice::Cuda);
    const auto ids = some_prompt(m.config.vocab_size, 40);
    for (KvDtype dtype : {KvDtype::F32, KvDtype::F16}) {
      const auto want = prompt_logits(cpu, m.config, ids, 40, dtype);
      for (int chunk : {40, 7, 1}) {
        const auto got = prompt_logits(gpu, m.config, ids, chunk, dtype);
        EXPECT_LE(test::relative_error(got, want), 1e-3) << path << " " << kv_dtype_name(dtype) << " chunk " << chunk;
      }
    }
  }
}

TEST(CudaForward, MatchesTransformers) {
  TQ_REQUIRE_CUDA();
  std::ifstream in(tiny_dir() + "/expected.json");
  ASSERT_TRUE(in) << tiny_dir() << "/expected.json";
  const nlohmann::json expected = nlohmann::json::parse(in);
  for (const auto& [name, variant] : expected["variants"].items()) {
    for (const auto& file : variant.value("ggufs", nlohmann::json::array())) {
      const std::string path = tiny_dir() + "/" + file.get<std::string>();
      LoadedModel m = load_model(path, {.dequantize_weights = true});
      Transformer gpu(m.config, m.weights);
      gpu.use_device(ComputeDevice::Cuda);
      for (const auto& kase : variant["cases"]) {
        const auto prompt = kase["prompt_ids"].get<std::vector<TokenId>>();
        const auto ref = kase["logits"].get<std::vector<std::vector<double>>>();
        const auto got = prompt_logits(gpu, m.config, prompt, static_cast<int>(prompt.size()), KvDtype::F32);
        std::vector<double> flat;
        for (const auto& row : ref) flat.insert(flat.end(), row.begin(), row.end());
        EXPECT_LE(test::relative_error(got, flat), 1e-4) << path;
        KvCache cache({m.config.num_layers, m.config.num_kv_heads, m.config.head_dim, 16, KvDtype::F32, KvDtype::F32}, 8);
        Generator gen(gpu, cache, m.tokenizer.get(), m.stop_ids);
        SamplingParams greedy;
        greedy.temperature = 0;
        greedy.max_tokens = static_cast<int>(kase["greedy_ids"].size());
        greedy.ignore_eos = true;
        EXPECT_EQ(gen.generate(prompt, greedy).ids, kase["greedy_ids"].get<std::vector<TokenId>>()) << path;
      }
    }
  }
}

// 64 greedy tokens of stories260K equal the CPU path's, in f32 and f16 KV.
TEST(CudaForward, Stories260KGreedyTokensEqualCpu) {
  TQ_REQUIRE_CUDA();
  TQ_REQUIRE_TESTDATA();
  LoadedModel m = load_model(test::testdata("stories260K/stories260K.gguf"));
  Transformer cpu(m.config, m.weights), gpu(m.config, m.weights);
  gpu.use_device(ComputeDevice::Cuda);
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 64;
  greedy.ignore_eos = true;
  for (KvDtype dtype : {KvDtype::F32, KvDtype::F16}) {
    const KvCacheShape shape{m.config.num_layers, m.config.num_kv_heads, m.config.head_dim, 16, dtype, dtype};
    KvCache cpu_cache(shape, 16), gpu_cache(shape, 16);
    Generator on_cpu(cpu, cpu_cache, m.tokenizer.get(), m.stop_ids), on_gpu(gpu, gpu_cache, m.tokenizer.get(), m.stop_ids);
    EXPECT_EQ(on_gpu.generate(prompt, greedy).ids, on_cpu.generate(prompt, greedy).ids) << kv_dtype_name(dtype);
  }
}

// Decode steps of four sequences batched give each the logits it gets alone. The attention and
// element-wise kernels are batch-invariant; cuBLAS may pick another algorithm for another batch
// size (the rewritten rows of the last tokens may then differ in their last bits: an f32 cache
// keeps that from being rounded into a visible step), so the bound is near fp32 rounding, and the
// greedy tokens must agree.
TEST(CudaForward, BatchedDecodeMatchesAlone) {
  TQ_REQUIRE_CUDA();
  LoadedModel m = load_model(tiny_dir() + "/qwen3-f32.gguf", {.dequantize_weights = true});
  Transformer gpu(m.config, m.weights);
  gpu.use_device(ComputeDevice::Cuda);
  const ModelConfig& c = m.config;
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim, 16, KvDtype::F32, KvDtype::F32}, 64);
  BlockPool pool(cache);
  std::vector<BlockTable> tables(4);
  std::vector<std::vector<TokenId>> prompts;
  for (int s = 0; s < 4; ++s) {
    prompts.push_back(some_prompt(c.vocab_size, 5 + 9 * s));
    ASSERT_TRUE(pool.allocate(tables[s], static_cast<int>(prompts[s].size()) + 1));
  }
  std::vector<float> logits;
  std::vector<std::vector<float>> alone(4);
  for (int s = 0; s < 4; ++s) {  // each prompt alone; the last token's logits
    ForwardBatch batch;
    for (size_t i = 0; i < prompts[s].size(); ++i) batch.add(prompts[s][i], static_cast<int32_t>(i), &tables[s], i + 1 == prompts[s].size());
    gpu.forward(batch, cache, logits);
    alone[s] = logits;
  }
  // The same last tokens again, all four in one batch (their rows are rewritten with equal values).
  ForwardBatch batch;
  for (int s = 0; s < 4; ++s) {
    const int last = static_cast<int>(prompts[s].size()) - 1;
    batch.add(prompts[s][last], last, &tables[s], true);
  }
  gpu.forward(batch, cache, logits);
  for (int s = 0; s < 4; ++s) {
    const std::vector<float> row(logits.begin() + size_t(s) * c.vocab_size, logits.begin() + size_t(s + 1) * c.vocab_size);
    EXPECT_LE(test::relative_error(row, alone[s]), 1e-5) << "sequence " << s;
    EXPECT_EQ(std::max_element(row.begin(), row.end()) - row.begin(),
              std::max_element(alone[s].begin(), alone[s].end()) - alone[s].begin());
  }
  for (auto& t : tables) pool.free(t);
}

TEST(CudaForward, QuantizedCacheIsRefusedByName) {
  TQ_REQUIRE_CUDA();
  LoadedModel m = load_model(tiny_dir() + "/qwen3-f32.gguf", {.dequantize_weights = true});
  Transformer gpu(m.config, m.weights);
  gpu.use_device(ComputeDevice::Cuda);
  const ModelConfig& c = m.config;
  KvCache cache({c.num_layers, c.num_kv_heads, c.head_dim, 16, KvDtype::Q8_0, KvDtype::Q8_0}, 4);
  BlockPool pool(cache);
  BlockTable table;
  ASSERT_TRUE(pool.allocate(table, 1));
  ForwardBatch batch;
  batch.add(1, 0, &table, true);
  std::vector<float> logits;
  try {
    gpu.forward(batch, cache, logits);
    ADD_FAILURE() << "a q8_0 cache ran on the GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q8_0"), std::string::npos) << e.what();
  }
  pool.free(table);
}

}  // namespace
}  // namespace tq
