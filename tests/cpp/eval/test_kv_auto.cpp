// `--kv-cache-dtype auto[:KLD]` (eval/kv_auto.h) on the tiny random Qwen3: the budget parses or
// fails by name, the choice keeps its prediction within the budget, spends fewer bytes as the
// budget grows, takes the cheapest format everywhere when anything goes and the largest when
// nothing does, and its measurement is the same every time.
#include <gtest/gtest.h>

#include "errors/error.h"
#include "eval/kl_divergence.h"
#include "eval/kv_auto.h"
#include "model/loader.h"

namespace tq {
namespace {

struct TinyQwen3 {
  LoadedModel model = load_model(std::string(TQ_SOURCE_DIR) + "/tests/data/tiny/qwen3-f32", {.dequantize_weights = true});
  Transformer transformer{model.config, model.weights};
  std::vector<TokenId> text() const {
    std::string t;
    for (int i = 0; i < 10; ++i) t += "Once upon a time, a little dog named Max found a red ball in the big green park. ";
    return model.tokenizer->encode(t, false);
  }
  KvCacheShape shape() const {
    KvCacheShape s;
    s.num_layers = model.config.num_layers;
    s.num_kv_heads = model.config.num_kv_heads;
    s.head_dim = model.config.head_dim;
    s.windows.sink_tokens = 4;
    s.windows.recent_tokens = 8;
    s.windows.dtype = KvDtype::F16;
    return s;
  }
};

TinyQwen3& tiny() {
  static TinyQwen3 t;
  return t;
}

KvAutoMeasurement measure() {
  KvAutoOptions o;
  o.ctx = 128;
  o.candidates = {KvDtype::TQ2H, KvDtype::TQ4H, KvDtype::Q8_0};
  const auto factory = [](const KvCacheShape& s, int blocks) { return std::make_unique<KvCache>(s, blocks); };
  return measure_kv_layers(tiny().transformer, tiny().text(), tiny().shape(), factory, o);
}

const KvAutoMeasurement& measured() {
  static const KvAutoMeasurement m = measure();
  return m;
}

KvAutoChoice choose(double budget) {
  KvAutoTarget t;
  t.kld = budget;
  return select_kv_layers(measured(), tiny().shape(), t);
}

size_t row_bytes(const KvAutoChoice& c, int head_dim = tiny().model.config.head_dim) {
  size_t b = 0;
  for (size_t l = 0; l < c.k.size(); ++l) b += kv_row_bytes(c.k[l], head_dim) + kv_row_bytes(c.v[l], head_dim);
  return b;
}

// A cache of L layers, one KV head of 64, for measurements made up by the test; its candidates.
KvCacheShape made_up_shape(int L) {
  KvCacheShape s;
  s.num_layers = L;
  s.num_kv_heads = 1;
  s.head_dim = 64;
  return s;
}
const std::vector<KvDtype> kMadeUpCandidates = {KvDtype::TQ2H, KvDtype::TQ4P, KvDtype::Q8_0};

TEST(KvAuto, BudgetParsesOrFailsByName) {
  EXPECT_EQ(parse_kv_auto("auto")->kld, kDefaultKvAutoBudget);
  EXPECT_EQ(parse_kv_auto("auto:0.05")->kld, 0.05);
  EXPECT_EQ(parse_kv_auto("auto:3.5b")->bits, 3.5);
  EXPECT_EQ(parse_kv_auto("auto:3.5b")->name(), "auto:3.5b");
  EXPECT_EQ(parse_kv_auto("auto")->name(), "auto:0.01");
  EXPECT_FALSE(parse_kv_auto("tq4").has_value());
  EXPECT_FALSE(parse_kv_auto("automatic").has_value());
  for (const char* bad : {"auto:", "auto:x", "auto:-1", "auto:0", "auto:0.01x", "auto:inf", "auto:b", "auto:0b"}) {
    try {
      parse_kv_auto(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("budget"), std::string::npos) << e.what();
    }
  }
}

TEST(KvAuto, ChoiceStaysWithinTheBudgetAndSpendsLessAsItGrows) {
  const int L = tiny().model.config.num_layers;
  const KvAutoChoice none = choose(1e-12), some = choose(0.02), any = choose(1e9);
  for (const KvAutoChoice* c : {&none, &some, &any}) {
    ASSERT_EQ(static_cast<int>(c->k.size()), L);
    ASSERT_EQ(static_cast<int>(c->v.size()), L);
  }
  for (int l = 0; l < L; ++l) {
    EXPECT_EQ(none.k[l], KvDtype::Q8_0);
    EXPECT_EQ(any.k[l], KvDtype::TQ2H);
    EXPECT_EQ(any.v[l], KvDtype::TQ2H);
  }
  EXPECT_LE(some.predicted_kld, 0.02);
  EXPECT_LE(row_bytes(some), row_bytes(none));
  EXPECT_GE(row_bytes(some), row_bytes(any));
  const KvAutoMeasurement& m = measured();
  ASSERT_EQ(m.all_kld.size(), m.candidates.size());
  for (double x : m.all_kld) EXPECT_TRUE(x >= 0 && std::isfinite(x));
  EXPECT_LE(m.all_kld.back(), m.all_kld.front());
  // Every single-side measurement is a KLD: finite and not negative; q8_0 sides cost the least.
  for (int l = 0; l < L; ++l)
    for (const auto* kld : {&m.k_kld[l], &m.v_kld[l]}) {
      for (double x : *kld) EXPECT_TRUE(x >= 0 && std::isfinite(x));
      EXPECT_LE(kld->back(), kld->front());
    }
  // Measured again from scratch: the same numbers, so the same choice.
  const KvAutoMeasurement again = measure();
  EXPECT_EQ(again.k_kld, m.k_kld);
  EXPECT_EQ(again.v_kld, m.v_kld);
  EXPECT_EQ(again.all_kld, m.all_kld);
}

// Weights kept as stored round the activations to 8 bits, so any change to the cache moves the
// output by a floor that every single-side run shows and that does not add up over sides
// (SmolLM2 Q4_1: ~0.003 per side, 0.0049 with every side at q8_0). The floor must not count once
// per side: a budget above the all-q8_0 KLD leaves room to downgrade, and a configuration of one
// candidate everywhere is predicted as its all-sides run measured.
TEST(KvAuto, AFloorEverySingleSideShowsIsCountedOnce) {
  const int L = 4;
  KvCacheShape base = made_up_shape(L);
  KvAutoMeasurement m;
  m.candidates = kMadeUpCandidates;
  const double floor = 0.003;
  for (int l = 0; l < L; ++l) {
    m.k_kld.push_back({floor + 0.004 * (l + 1), floor + 0.0004 * (l + 1), floor});
    m.v_kld.push_back({floor + 0.002, floor + 0.0002, floor});
  }
  m.all_kld = {0.040, 0.008, 0.005};
  KvAutoTarget all_top;
  all_top.kld = 0.0049;  // below the largest candidate's own KLD: nothing can be downgraded
  const KvAutoChoice top = select_kv_layers(m, base, all_top);
  EXPECT_DOUBLE_EQ(top.predicted_kld, 0.005);
  for (int l = 0; l < L; ++l) EXPECT_EQ(top.k[l], KvDtype::Q8_0);
  KvAutoTarget mid;
  mid.kld = 0.0081;  // room for every side at tq4p (predicted as measured: 0.008), not for tq2h
  const KvAutoChoice c = select_kv_layers(m, base, mid);
  EXPECT_NEAR(c.predicted_kld, 0.008, 1e-12);
  for (int l = 0; l < L; ++l) {
    EXPECT_EQ(c.k[l], KvDtype::TQ4P) << l;
    EXPECT_EQ(c.v[l], KvDtype::TQ4P) << l;
  }
  KvAutoTarget loose;
  loose.kld = 0.05;
  for (KvDtype d : select_kv_layers(m, base, loose).v) EXPECT_EQ(d, KvDtype::TQ2H);

  // No side alone shows tq4p's excess, every side together does (0.003 over q8_0): each side
  // takes an equal share instead of counting as free. Protected layers (0 and 3 here) are
  // neither measured nor shared in.
  base.protect_layers = 1;
  for (int l = 0; l < L; ++l) {
    const double f = base.is_protected(l) ? 0 : floor;
    m.k_kld[l] = {f + 0.004, f, f};
    m.v_kld[l] = {f + 0.002, f, f};
  }
  KvAutoTarget two_sides;
  two_sides.kld = 0.0066;  // 0.0016 over 0.005: two shares of 0.00075, not three
  const KvAutoChoice half = select_kv_layers(m, base, two_sides);
  EXPECT_NEAR(half.predicted_kld, 0.005 + 2 * 0.003 / 4, 1e-12);
  int at_tq4p = 0;
  for (int l = 1; l < L - 1; ++l) at_tq4p += (half.k[l] == KvDtype::TQ4P) + (half.v[l] == KvDtype::TQ4P);
  EXPECT_EQ(at_tq4p, 2);
}

// The search against measured runs (search_kv_choice), with made-up measurements of a choice: it
// keeps the cheapest choice measured within the limit, finds a cheaper one than the first
// selection when the prediction was too careful, gets under the limit when it was too bold, and
// falls back to q8_0 everywhere when nothing is within; never more than 6 distinct runs.
TEST(KvAuto, TheAimIsSearchedAgainstMeasuredRuns) {
  const int L = 8;
  KvCacheShape base = made_up_shape(L);
  KvAutoMeasurement m;
  m.candidates = kMadeUpCandidates;
  for (int l = 0; l < L; ++l) {
    m.k_kld.push_back({0.002 * (l + 1), 0.0002 * (l + 1), 0});
    m.v_kld.push_back({0.001 * (l + 1), 0.0001 * (l + 1), 0});
  }
  m.all_kld = {0.108, 0.0108, 0.001};
  const auto bytes = [](const KvAutoChoice& c) { return row_bytes(c, 64); };
  const double limit = 0.007;
  KvAutoTarget at_limit;
  at_limit.kld = limit;
  const KvAutoChoice first = select_kv_layers(m, base, at_limit);
  for (double truth : {0.5, 1.5}) {  // what a choice measures, relative to its predicted excess
    const auto truly = [&](const KvAutoChoice& c) { return m.all_kld.back() + truth * (c.predicted_kld - m.all_kld.back()); };
    std::vector<KvAutoChoice> runs;
    const KvAutoChoice c = search_kv_choice(m, base, limit, [&](const KvAutoChoice& r) {
      runs.push_back(r);
      return truly(r);
    });
    EXPECT_LE(runs.size(), 6u) << truth;
    EXPECT_LE(c.measured_kld, limit) << truth;
    EXPECT_DOUBLE_EQ(c.measured_kld, truly(c)) << truth;
    for (const KvAutoChoice& r : runs)  // no run within the limit was cheaper than the one kept
      if (truly(r) <= limit) EXPECT_GE(bytes(r), bytes(c)) << truth;
    if (truth < 1) EXPECT_LT(bytes(c), bytes(first));  // the first selection measured well within
  }
  int calls = 0;
  const KvAutoChoice none = search_kv_choice(m, base, limit, [&](const KvAutoChoice& c) {
    ++calls;
    return c.k[0] == KvDtype::Q8_0 && c.v[0] == KvDtype::Q8_0 && c.k[L - 1] == KvDtype::Q8_0 ? 0.0071 : 0.02;
  });
  for (int l = 0; l < L; ++l) EXPECT_EQ(none.k[l], KvDtype::Q8_0);
  EXPECT_DOUBLE_EQ(none.measured_kld, 0.0071);  // the fallback is measured too: over the limit
  EXPECT_LE(calls, 7);
}

TEST(KvAuto, TheWholeChoiceIsMeasuredAndKeptWithinTheBudget) {
  const auto factory = [](const KvCacheShape& s, int blocks) { return std::make_unique<KvCache>(s, blocks); };
  KvAutoOptions o;
  o.ctx = 128;
  for (double budget : {0.002, 0.02}) {
    KvAutoTarget t;
    t.kld = budget;
    const KvAutoChoice c = choose_kv_layers(tiny().transformer, tiny().text(), tiny().shape(), factory, measured(), t, o);
    ASSERT_GE(c.measured_kld, 0.0);
    // Within the margin's share of the budget, unless even the largest candidate everywhere is over it.
    bool all_top = true;
    for (size_t l = 0; l < c.k.size(); ++l) all_top = all_top && c.k[l] == KvDtype::Q8_0 && c.v[l] == KvDtype::Q8_0;
    EXPECT_TRUE(c.measured_kld <= budget * o.calibration_margin || all_top) << budget << ": " << c.measured_kld;
    // The KLD it reports is the choice's own, run again here from scratch.
    const auto run = [&](const std::vector<KvDtype>& k, const std::vector<KvDtype>& v) {
      KvCacheShape s = tiny().shape();
      s.k_layers = k, s.v_layers = v;
      KvCache cache(s, 10);
      return window_log_probs(tiny().transformer, cache, tiny().text().data(), o.ctx, 256);
    };
    const int L = tiny().model.config.num_layers;
    const std::vector<float> ref = run(std::vector<KvDtype>(L, KvDtype::F32), std::vector<KvDtype>(L, KvDtype::F32));
    EXPECT_DOUBLE_EQ(c.measured_kld, mean_kld(ref, run(c.k, c.v), tiny().model.config.vocab_size)) << budget;
  }
}

TEST(KvAuto, BitsBudgetIsKeptWithTheLeastPredictedKld) {
  KvCacheShape base = tiny().shape();
  const auto bits = [&](const KvAutoChoice& c) {
    KvCacheShape s = base;
    s.k_layers = c.k, s.v_layers = c.v;
    return s.bits_per_element_at(1024);
  };
  double last_kld = -1;
  for (double budget : {9.0, 6.0, 4.0, 3.0}) {
    KvAutoTarget t;
    t.bits = budget;
    const KvAutoChoice c = select_kv_layers(measured(), base, t);
    EXPECT_LE(bits(c), budget);
    EXPECT_GE(c.predicted_kld, last_kld);  // fewer bits, no less error
    last_kld = c.predicted_kld;
  }
  KvAutoTarget tiny_bits;
  tiny_bits.bits = 0.5;  // below the smallest candidate: everything at tq2h
  for (KvDtype d : select_kv_layers(measured(), base, tiny_bits).k) EXPECT_EQ(d, KvDtype::TQ2H);
}

// The single-side runs resume at their layer from the reference run's hidden states: the same
// log-probabilities as running every layer, bit for bit.
TEST(KvAuto, ResumingAtALayerChangesNothing) {
  const std::vector<TokenId> ids = tiny().text();
  const int ctx = 96, L = tiny().model.config.num_layers;
  KvCacheShape f32 = tiny().shape();
  f32.k_dtype = f32.v_dtype = KvDtype::F32;
  LayerInputs inputs;
  {
    KvCache cache(f32, 8);
    window_log_probs(tiny().transformer, cache, ids.data(), ctx, 40, &inputs);  // chunks of 40: resumes mid-window too
  }
  ASSERT_EQ(static_cast<int>(inputs.size()), L);
  for (int l = 1; l < L; ++l) {
    KvCacheShape one = f32;
    one.k_layers.assign(L, KvDtype::F32);
    one.v_layers.assign(L, KvDtype::F32);
    one.k_layers[l] = KvDtype::TQ2H;
    KvCache full_cache(one, 8), resumed_cache(one, 8);
    const std::vector<float> full = window_log_probs(tiny().transformer, full_cache, ids.data(), ctx, 40);
    const std::vector<float> resumed = window_log_probs(tiny().transformer, resumed_cache, ids.data(), ctx, 40, nullptr, &inputs, l);
    EXPECT_EQ(full, resumed) << "layer " << l;
  }
  KvCache cache(f32, 8);
  EXPECT_THROW(window_log_probs(tiny().transformer, cache, ids.data(), ctx, 40, nullptr, &inputs, 0), Error);
}

TEST(KvAuto, ShortTextFailsClearly) {
  KvAutoOptions o;
  const auto factory = [](const KvCacheShape& s, int blocks) { return std::make_unique<KvCache>(s, blocks); };
  const std::vector<TokenId> ids(10, 1);
  EXPECT_THROW(measure_kv_layers(tiny().transformer, ids, tiny().shape(), factory, o), Error);
}

}  // namespace
}  // namespace tq
