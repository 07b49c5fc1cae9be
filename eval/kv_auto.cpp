#include "eval/kv_auto.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "errors/error.h"
#include "eval/kl_divergence.h"

namespace tq {

std::string KvAutoTarget::name() const { return bits > 0 ? fmt::format("auto:{:g}b", bits) : fmt::format("auto:{:g}", kld); }

std::optional<KvAutoTarget> parse_kv_auto(std::string_view mode) {
  if (mode == "auto") return KvAutoTarget{};
  if (mode.substr(0, 5) != "auto:") return std::nullopt;
  std::string text(mode.substr(5));
  const bool bits = !text.empty() && text.back() == 'b';
  if (bits) text.pop_back();
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || !(value > 0))
    fail("--kv-cache-dtype {}: the {} budget '{}' must be a positive number (e.g. auto:0.01, or auto:3.5b for bits "
         "per element)", mode, bits ? "bits" : "KLD", text);
  KvAutoTarget t;
  if (bits) {
    t.bits = value;
  } else {
    t.kld = value;
  }
  return t;
}

KvAutoMeasurement measure_kv_layers(Transformer& model, const std::vector<TokenId>& ids, const KvCacheShape& base,
                                    const ShapeCacheFactory& make_cache, const KvAutoOptions& o,
                                    const std::function<void(const std::string&)>& progress) {
  const int n = std::min<int>(static_cast<int>(ids.size()), o.ctx);
  if (n < 64) fail("--kv-cache-dtype auto needs at least 64 tokens of calibration text, got {}", n);
  KvAutoMeasurement c;
  for (KvDtype d : o.candidates) {  // the ones this head_dim can be stored as
    try {
      check_kv_dtype(d, base.head_dim, false);
      c.candidates.push_back(d);
    } catch (const Error&) {
    }
  }
  if (c.candidates.empty()) fail("--kv-cache-dtype auto: no candidate row format can store head_dim {}", base.head_dim);
  const int L = base.num_layers, C = static_cast<int>(c.candidates.size());
  const int vocab = model.config().vocab_size;
  const int blocks = (n + base.block_size - 1) / base.block_size + 1;

  KvCacheShape f32 = base;
  f32.k_dtype = f32.v_dtype = KvDtype::F32;
  f32.k_layers.assign(L, KvDtype::F32);
  f32.v_layers.assign(L, KvDtype::F32);
  f32.preset.clear();
  // A run coding layer side l alone has the reference's hidden states up to layer l, so it resumes
  // there (half the layers on average).
  LayerInputs inputs;
  auto run = [&](const KvCacheShape& shape, int first_layer = 0) {
    std::unique_ptr<KvCache> cache = make_cache(shape, blocks);
    return window_log_probs(model, *cache, ids.data(), n, 256, nullptr, first_layer > 0 ? &inputs : nullptr, first_layer);
  };
  const std::vector<float> ref = [&] {
    std::unique_ptr<KvCache> cache = make_cache(f32, blocks);
    return window_log_probs(model, *cache, ids.data(), n, 256, &inputs);
  }();

  c.k_kld.assign(L, std::vector<double>(C));
  c.v_kld.assign(L, std::vector<double>(C));
  for (int l = 0; l < L; ++l) {
    if (progress) progress(fmt::format("auto: layer {}/{}", l + 1, L));
    if (base.is_protected(l)) continue;  // stored as protect_dtype whatever is chosen
    for (int side = 0; side < 2; ++side)
      for (int k = 0; k < C; ++k) {
        KvCacheShape one = f32;
        (side == 0 ? one.k_layers : one.v_layers)[l] = c.candidates[k];
        (side == 0 ? c.k_kld : c.v_kld)[l][k] = mean_kld(ref, run(one, l), vocab);
      }
  }
  c.all_kld.assign(C, 0.0);
  for (int k = 0; k < C; ++k) {
    KvCacheShape all = f32;
    all.k_layers.assign(L, c.candidates[k]);
    all.v_layers.assign(L, c.candidates[k]);
    c.all_kld[k] = mean_kld(ref, run(all), vocab);
  }
  return c;
}

KvAutoChoice select_kv_layers(const KvAutoMeasurement& c, const KvCacheShape& base, const KvAutoTarget& target) {
  const int L = base.num_layers, C = static_cast<int>(c.candidates.size());
  if (static_cast<int>(c.k_kld.size()) != L || static_cast<int>(c.v_kld.size()) != L || C == 0)
    fail("--kv-cache-dtype auto: the measurement is for {} layers, the cache has {}", c.k_kld.size(), L);
  if (static_cast<int>(c.all_kld.size()) != C) fail("--kv-cache-dtype auto: the measurement has no all-sides run per candidate");
  // A side's excess at candidate k: what coding it alone at k costs beyond coding it alone at the
  // largest candidate. Each candidate's excesses are scaled so that the sides all at k predict
  // what the all-sides run at k measured.
  const int top = C - 1;
  auto excess = [&](int l, int side, int k) {
    const std::vector<double>& single = (side == 0 ? c.k_kld : c.v_kld)[l];
    return std::max(0.0, single[k] - single[top]);
  };
  int unprotected = 0;
  for (int l = 0; l < L; ++l) unprotected += base.is_protected(l) ? 0 : 1;
  std::vector<double> scale(C, 0.0), flat_share(C, 0.0);
  for (int k = 0; k < top; ++k) {
    double sum = 0;
    for (int l = 0; l < L; ++l)
      if (!base.is_protected(l)) sum += excess(l, 0, k) + excess(l, 1, k);
    const double cost = std::max(0.0, c.all_kld[k] - c.all_kld[top]);
    scale[k] = sum > 0 ? cost / sum : 0.0;
    // No side alone measured any excess, yet all of them together did: every side takes an
    // equal share (a single-side floor can hide a small excess).
    if (sum <= 0 && cost > 0) flat_share[k] = cost / std::max(1, 2 * unprotected);
  }
  auto side_kld = [&](int l, int side, int k) { return scale[k] * excess(l, side, k) + flat_share[k]; };
  // Greedy downgrades from the largest candidate.
  std::vector<int> k_at(L, top), v_at(L, top);
  double predicted = c.all_kld[top];
  std::vector<char> frozen(2 * L, 0);
  auto bits_at_1024 = [&] {
    KvCacheShape s = base;
    s.k_layers.clear(), s.v_layers.clear();
    for (int l = 0; l < L; ++l) s.k_layers.push_back(c.candidates[k_at[l]]), s.v_layers.push_back(c.candidates[v_at[l]]);
    return s.bits_per_element_at(1024);
  };
  for (;;) {
    if (target.bits > 0 && bits_at_1024() <= target.bits) break;
    int best_l = -1, best_side = 0;
    double best_rate = std::numeric_limits<double>::infinity(), best_delta = 0;
    for (int l = 0; l < L; ++l)
      for (int side = 0; side < 2; ++side) {
        const int at = side == 0 ? k_at[l] : v_at[l];
        if (at == 0 || frozen[2 * l + side] || base.is_protected(l)) continue;
        const double delta = side_kld(l, side, at - 1) - side_kld(l, side, at);
        const double saved = double(kv_row_bytes(c.candidates[at], base.head_dim)) -
                             double(kv_row_bytes(c.candidates[at - 1], base.head_dim));
        const double rate = delta / std::max(saved, 1e-9);
        if (rate < best_rate) best_rate = rate, best_l = l, best_side = side, best_delta = delta;
      }
    if (best_l < 0) break;
    if (target.bits <= 0 && predicted + best_delta > target.kld) {
      frozen[2 * best_l + best_side] = 1;  // this side stays; cheaper ones may still fit
      continue;
    }
    predicted += best_delta;
    --(best_side == 0 ? k_at : v_at)[best_l];
  }
  KvAutoChoice choice;
  choice.predicted_kld = predicted;
  for (int l = 0; l < L; ++l) {
    choice.k.push_back(c.candidates[k_at[l]]);
    choice.v.push_back(c.candidates[v_at[l]]);
  }
  return choice;
}

KvAutoChoice choose_kv_layers(Transformer& model, const std::vector<TokenId>& ids, const KvCacheShape& base,
                              const ShapeCacheFactory& make_cache, const KvAutoMeasurement& m,
                              const KvAutoTarget& target, const KvAutoOptions& o) {
  const int n = std::min<int>(static_cast<int>(ids.size()), o.ctx);
  if (n < 64) fail("--kv-cache-dtype auto needs at least 64 tokens of calibration text, got {}", n);
  const int blocks = (n + base.block_size - 1) / base.block_size + 1;
  const int vocab = model.config().vocab_size;
  auto run = [&](const std::vector<KvDtype>& k, const std::vector<KvDtype>& v) {
    KvCacheShape s = base;
    s.preset.clear();
    s.k_layers = k;
    s.v_layers = v;
    std::unique_ptr<KvCache> cache = make_cache(s, blocks);
    return window_log_probs(model, *cache, ids.data(), n, 256);
  };
  const std::vector<float> ref =
      run(std::vector<KvDtype>(base.num_layers, KvDtype::F32), std::vector<KvDtype>(base.num_layers, KvDtype::F32));
  const auto kld_of = [&](const KvAutoChoice& c) { return mean_kld(ref, run(c.k, c.v), vocab); };
  if (target.bits > 0) {
    KvAutoChoice choice = select_kv_layers(m, base, target);
    choice.measured_kld = kld_of(choice);
    return choice;
  }
  return search_kv_choice(m, base, target.kld * o.calibration_margin, kld_of);
}

KvAutoChoice search_kv_choice(const KvAutoMeasurement& m, const KvCacheShape& base, double limit,
                              const std::function<double(const KvAutoChoice&)>& kld_of) {
  if (m.candidates.empty() || m.all_kld.size() != m.candidates.size())
    fail("--kv-cache-dtype auto: the measurement has no all-sides run per candidate");
  // The prediction misses mixed configurations both ways, so the budget the selection aims at is
  // searched, in its part above the largest candidate's all-sides KLD: scaled by what the last choice
  // measured (a step of 15 % at least) until one choice measures within the limit and one above it,
  // then bisected between them. The choice kept is the one with the fewest bytes that measured
  // within the limit (the largest candidate everywhere when none did).
  const auto bytes = [&](const KvAutoChoice& c) {
    KvCacheShape s = base;
    s.k_layers = c.k, s.v_layers = c.v;
    return s.bytes_per_token();
  };
  std::optional<KvAutoChoice> best;
  std::vector<KvAutoChoice> tried;
  auto measure = [&](KvAutoChoice choice) {
    const auto same = std::find_if(tried.begin(), tried.end(),
                                   [&](const KvAutoChoice& t) { return t.k == choice.k && t.v == choice.v; });
    choice.measured_kld = same != tried.end() ? same->measured_kld : kld_of(choice);
    tried.push_back(choice);
    return choice;
  };
  // The aim's part above the largest candidate's own KLD is what the downgrades may spend.
  const double floor = m.all_kld.back();
  double within = 0, over = 0;  // the largest aim that measured within the limit, the smallest above
  KvAutoTarget aim;
  aim.kld = limit;
  for (int attempt = 0; attempt < 6 && limit > floor; ++attempt) {
    const KvAutoChoice choice = measure(select_kv_layers(m, base, aim));
    if (choice.measured_kld <= limit) {
      within = std::max(within, aim.kld);
      if (!best || bytes(choice) < bytes(*best)) best = choice;
    } else {
      over = over > 0 ? std::min(over, aim.kld) : aim.kld;
    }
    if (within > 0 && over > 0) {
      if (over - within < 0.01 * (over - floor)) break;
      aim.kld = 0.5 * (within + over);
    } else {  // steps of at least 15 %: a choice just over the limit must not be tried again as it is
      const double ratio = (limit - floor) / std::max(choice.measured_kld - floor, 1e-12);
      aim.kld = floor + (aim.kld - floor) * (over > 0 ? std::clamp(ratio, 0.05, 0.85) : std::max(ratio, 1.15));
    }
  }
  if (best) return *best;
  KvAutoChoice top;  // nothing measured within the limit: the largest candidate everywhere
  top.k.assign(base.num_layers, m.candidates.back());
  top.v.assign(base.num_layers, m.candidates.back());
  top.predicted_kld = floor;
  return measure(top);
}

}  // namespace tq
