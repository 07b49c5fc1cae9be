// The engine's invariants in every quantized KV mode, with and without full-precision windows:
// on the tiny random Qwen3 (head_dim 32, so every format can store it), a request's output is the
// same alone, batched with others, prefilled in small chunks, preempted and recomputed, and served
// from the prefix cache; a token's logits do not depend on what it is batched with; every block
// comes back. Prompts span several blocks so that prefix hits really happen.
#include <gtest/gtest.h>

#include <map>

#include "support/batch_invariance_support.h"
#include "engine/engine_core.h"
#include "engine/kv_calibration.h"
#include "model/loader.h"

namespace tq {
namespace {

const std::string kQwen3Dir = std::string(TQ_SOURCE_DIR) + "/tests/data/tiny/qwen3-f32";

struct TinyQwen3 {
  LoadedModel model = load_model(kQwen3Dir, {.dequantize_weights = true});
  Transformer transformer{model.config, model.weights};
};

TinyQwen3& qwen3() {
  static TinyQwen3 e;
  return e;
}

struct KvMode {
  KvDtype dtype;
  KvWindows windows;
  std::string name;
};

void PrintTo(const KvMode& m, std::ostream* os) { *os << m.name; }

std::unique_ptr<KvCache> make_cache(const KvMode& mode, int blocks) {
  const ModelConfig& c = qwen3().model.config;
  KvCacheShape shape;
  shape.num_layers = c.num_layers;
  shape.num_kv_heads = c.num_kv_heads;
  shape.head_dim = c.head_dim;
  shape.k_dtype = shape.v_dtype = mode.dtype;
  shape.windows = mode.windows;
  if (!kv_dtype_is_channel_bits(mode.dtype)) return std::make_unique<KvCache>(shape, blocks);
  // Channel-bit rows need the calibrated axes: a short text of the model's own kind.
  static const KvCalibration cal = [] {
    std::string text;
    for (int i = 0; i < 12; ++i) text += "Once upon a time, a little dog named Max found a red ball in the big green park. ";
    KvCalibrationOptions o;
    o.channel_spectra = true;
    return calibrate_kv(qwen3().transformer, qwen3().model.tokenizer->encode(text, false), o);
  }();
  KvChannelCodings codings;
  codings.k = channel_codings(cal.k_spectra, kv_dtype_tq_bits(mode.dtype).first);
  codings.v = channel_codings(cal.v_spectra, kv_dtype_tq_bits(mode.dtype).first);
  return std::make_unique<KvCache>(shape, blocks, KvQuantOptions{}, OutlierPartition{}, cal.affine, codings);
}

EngineConfig config(int budget, int max_seqs, bool prefix = true) {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = budget;
  c.scheduler.max_num_seqs = max_seqs;
  c.enable_prefix_caching = prefix;
  return c;
}

// Runs every request to completion; generated ids by request id.
std::map<uint64_t, std::vector<TokenId>> run_all(EngineCore& engine, std::vector<std::unique_ptr<Request>> requests) {
  std::map<uint64_t, std::vector<TokenId>> out;
  for (auto& r : requests) engine.add_request(std::move(r));
  for (int s = 0; s < 20000 && engine.has_work(); ++s) {
    for (RequestOutput& o : engine.step()) out[o.id].insert(out[o.id].end(), o.new_ids.begin(), o.new_ids.end());
    engine.check_consistency();
  }
  EXPECT_FALSE(engine.has_work());
  return out;
}

// 12 prompts of 40-110 tokens sharing three long starts (prefix hits of several blocks).
std::vector<std::vector<TokenId>> prompts() {
  const std::vector<std::string> starts = {
      "Once upon a time, there was a little girl named Lily who lived by the sea.",
      "The cat sat on the mat and looked at the big red ball in the garden.",
      "Tom and Sue went to the park. They saw a dog and a bird in a tree."};
  std::vector<std::vector<TokenId>> out;
  for (int i = 0; i < 12; ++i) {
    std::string text = starts[i % 3];
    for (int k = 0; k < i % 4; ++k) text += " She was happy.";
    text += i % 2 ? " One day" : " Then";
    out.push_back(qwen3().model.tokenizer->encode(text, false));
  }
  return out;
}

SamplingParams params_for(size_t i) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 12 + int(i % 5) * 5;
  p.ignore_eos = true;
  if (i % 3 == 1) {  // seeded sampling resumes where it was too
    p.temperature = 0.9f;
    p.seed = 77 + i;
  }
  return p;
}

class EngineKvModes : public ::testing::TestWithParam<KvMode> {};

TEST_P(EngineKvModes, OutputsEqualEachRequestAloneBatchedChunkedPreemptedAndFromThePrefixCache) {
  const auto ps = prompts();
  ASSERT_GE(ps[0].size(), 48u) << "prompts must span several blocks";
  std::map<uint64_t, std::vector<TokenId>> alone;
  for (size_t i = 0; i < ps.size(); ++i) {
    auto cache = make_cache(GetParam(), 64);
    EngineCore engine(qwen3().transformer, *cache, nullptr, {}, config(4096, 1, false));
    std::vector<std::unique_ptr<Request>> one;
    one.push_back(std::make_unique<Request>(i, ps[i], params_for(i)));
    alone[i] = run_all(engine, std::move(one))[i];
  }
  struct Setting {
    const char* what;
    int budget, max_seqs, blocks;
  };
  for (const Setting& s : {Setting{"batched", 4096, 16, 256}, Setting{"chunked by 7", 7, 16, 256},
                           Setting{"preempted", 48, 12, 14}}) {
    SCOPED_TRACE(s.what);
    auto cache = make_cache(GetParam(), s.blocks);
    EngineCore engine(qwen3().transformer, *cache, nullptr, {}, config(s.budget, s.max_seqs));
    std::vector<std::unique_ptr<Request>> reqs;
    // Two waves: the second finds the first's blocks in the prefix cache.
    for (size_t i = 0; i < ps.size(); ++i) reqs.push_back(std::make_unique<Request>(i, ps[i], params_for(i)));
    auto got = run_all(engine, std::move(reqs));
    std::vector<std::unique_ptr<Request>> again;
    for (size_t i = 0; i < ps.size(); ++i) again.push_back(std::make_unique<Request>(100 + i, ps[i], params_for(i)));
    const auto second = run_all(engine, std::move(again));
    for (size_t i = 0; i < ps.size(); ++i) {
      EXPECT_EQ(got[i], alone[i]) << "request " << i;
      EXPECT_EQ(second.at(100 + i), alone[i]) << "request " << i << ", second wave";
    }
    const EngineStats st = engine.stats();
    EXPECT_EQ(st.blocks_in_use, 0);
    if (GetParam().windows.any()) {
      EXPECT_GT(st.prefix.hits, 0u) << "the second wave must hit the cache";
    } else {
      EXPECT_GE(st.prefix.hits, 3u * 48) << "the second wave must hit the cache";
    }
    if (std::string(s.what) == "preempted") EXPECT_GT(st.preemptions, 0u);
  }
}

TEST_P(EngineKvModes, LogitsDoNotDependOnBatchComposition) {
  KvMode mode = GetParam();
  mode.windows.window_blocks = 0;  // the test holds every window block (it never drops old windows)
  auto cache = make_cache(mode, 64);
  const auto ps = prompts();
  test::expect_logits_independent_of_batch(qwen3().transformer, *cache, {ps[0], ps[1], ps[2], ps[3]},
                                           qwen3().model.config.vocab_size, 5, 5);
}

// window_blocks 0: one per data block; else that few, so that the engine's window store hands
// window blocks over between sequences and cuts prefix hits back.
KvWindows windows(int sink, int recent, int window_blocks = 0) {
  KvWindows w;
  w.sink_tokens = sink;
  w.recent_tokens = recent;
  w.window_blocks = window_blocks;
  return w;
}

INSTANTIATE_TEST_SUITE_P(
    Modes, EngineKvModes,
    ::testing::Values(KvMode{KvDtype::TQ4, {}, "tq4"}, KvMode{KvDtype::TQ3, {}, "tq3"}, KvMode{KvDtype::TQ2, {}, "tq2"},
                      KvMode{KvDtype::Q4_0H, {}, "q4_0h"}, KvMode{KvDtype::TQ4, windows(4, 20), "tq4_windows"},
                      KvMode{KvDtype::TQ4, windows(4, 20, 24), "tq4_windows_24_blocks"},
                      KvMode{KvDtype::TQ3, windows(4, 20, 24), "tq3_windows_24_blocks"},
                      KvMode{KvDtype::TQ2, windows(2, 9, 16), "tq2_windows_16_blocks"},
                      KvMode{KvDtype::TQ4, windows(20, 0, 16), "tq4_sinks_only"},
                      KvMode{KvDtype::Q4_0H, windows(4, 33, 24), "q4_0h_windows_24_blocks"},
                      KvMode{KvDtype::TQ3C, {}, "tq3c"}, KvMode{KvDtype::TQ3C, windows(4, 20, 24), "tq3c_windows_24_blocks"},
                      KvMode{KvDtype::TQ4P, {}, "tq4p"}, KvMode{KvDtype::TQ4P, windows(4, 20, 24), "tq4p_windows_24_blocks"},
                      KvMode{KvDtype::TQ3O, {}, "tq3o"}, KvMode{KvDtype::TQ2O, windows(4, 20, 24), "tq2o_windows_24_blocks"}),
    [](const ::testing::TestParamInfo<KvMode>& info) { return info.param.name; });

}  // namespace
}  // namespace tq
