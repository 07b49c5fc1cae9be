// `--kv-cache-dtype auto[:KLD]`: each layer's K and V row format chosen on the calibration text,
// the fewest bytes whose mean KL divergence from the f32 cache measures within a margin of the budget;
// `auto:<B>b`: the least predicted KLD within B bits per element at 1024 tokens (windows included).
//
// Layers differ in how much their cache's error moves the output: on SmolLM2 some layer sides
// barely notice 2-bit rows while others need 4 (docs/FIDELITY.md, "auto"). The choice measures it:
// one window of the calibration text (its first `ctx` tokens, positions ctx/2.. scored) runs once
// with an f32 cache, then once per layer side and candidate format with only that side coded (the
// rest f32; these resume at their layer from the f32 run's hidden states), and once per candidate
// with every side coded. A configuration's KLD is predicted as the all-sides KLD of the largest
// candidate plus each side's excess: its single-side KLD beyond the same side's at the largest
// candidate, scaled per candidate so that every side at one candidate predicts what that
// candidate's all-sides run measured. The excess, not the single-side KLD itself, is what adds up:
// with weights kept as stored, whose products round the activations to 8 bits, any change to
// the cache, even f16 rows, moves the output by a floor (KLD ~0.003 on SmolLM2 per single side) that
// does not grow with the number of sides changed. Greedy: every
// side starts at the largest candidate; the downgrade with the least predicted KLD per byte saved
// is taken while the prediction stays within the budget. All runs use the cache's windows.
//
// The choice is a pure function of the model, the text, the windows and the candidates, so every
// process that starts with the same flags picks the same layers (and the prefix cache and
// batch invariance hold as for any fixed configuration).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kv/kv_cache.h"
#include "model/transformer.h"

namespace tq {

inline constexpr double kDefaultKvAutoBudget = 0.01;

// What the choice keeps to: a KLD budget, or (bits > 0) bits per element at 1024 tokens.
struct KvAutoTarget {
  double kld = kDefaultKvAutoBudget;
  double bits = 0;
  std::string name() const;  // "auto:0.01", "auto:3.5b"
};

// "auto" → KLD 0.01, "auto:0.02" → KLD 0.02, "auto:3.5b" → 3.5 bits; none when `mode` is not
// auto; fails naming the problem on a budget that is not a positive finite number.
std::optional<KvAutoTarget> parse_kv_auto(std::string_view mode);

struct KvAutoOptions {
  int ctx = 512;  // calibration tokens per run
  // Ascending in bytes; the row formats a side may take (those that cannot store the model's
  // head_dim are left out). At 4 bits the pair-coded rows: tq4h's bytes, less error.
  std::vector<KvDtype> candidates = {KvDtype::TQ2H, KvDtype::TQ3H, KvDtype::TQ4P, KvDtype::Q8_0};
  // A KLD budget must hold on text the choice did not see: the whole choice has to measure within
  // this fraction of it on the calibration text (on SmolLM2 the text least like the calibration
  // text, Python's reference docs, measured 1.41 times what the calibration text did: 1 / 1.41 =
  // 0.71; docs/FIDELITY.md, "auto").
  double calibration_margin = 0.7;
};

// What the calibration text measured (independent of the budget): [layer][candidate] KLD with
// only that side coded (0 in protected layers), and [candidate] KLD with every side coded.
struct KvAutoMeasurement {
  std::vector<KvDtype> candidates;
  std::vector<std::vector<double>> k_kld, v_kld;
  std::vector<double> all_kld;
};

struct KvAutoChoice {
  std::vector<KvDtype> k, v;  // per layer
  double predicted_kld = 0;
  double measured_kld = -1;  // the whole choice run on the calibration text (choose_kv_layers), or -1
};

// Builds a cache of `shape` with room for `num_blocks` blocks (calibrated like the real one).
using ShapeCacheFactory = std::function<std::unique_ptr<KvCache>(const KvCacheShape& shape, int num_blocks)>;

// base: the cache's shape (layers, heads, windows); its dtypes are ignored. Fails when the text
// has fewer than 64 tokens or no candidate can store the model's head_dim. The runs:
// 1 + unprotected layers * 2 * candidates + candidates forwards of options.ctx tokens.
KvAutoMeasurement measure_kv_layers(Transformer& model, const std::vector<TokenId>& ids, const KvCacheShape& base,
                                    const ShapeCacheFactory& make_cache, const KvAutoOptions& options,
                                    const std::function<void(const std::string&)>& progress = {});
// The greedy choice within the target (base gives the layers, protection, head_dim and windows):
// downgrades while the prediction stays within a KLD budget, or until the bits per element at
// 1024 tokens are within a bits budget (all at the smallest candidate when even that is over).
KvAutoChoice select_kv_layers(const KvAutoMeasurement& m, const KvCacheShape& base, const KvAutoTarget& target);

// select_kv_layers, then the choice run whole on the calibration text. For a KLD budget the
// prediction is only a guide (it can miss a mixed configuration either way), so the budget the
// selection aims at is searched over at most 6 runs of a choice: the choice kept is the one with
// the fewest bytes whose KLD measured within calibration_margin x the budget, or the largest
// candidate on every side when none did (measured too: it may be within, or over).
KvAutoChoice choose_kv_layers(Transformer& model, const std::vector<TokenId>& ids, const KvCacheShape& base,
                              const ShapeCacheFactory& make_cache, const KvAutoMeasurement& m,
                              const KvAutoTarget& target, const KvAutoOptions& options);

// choose_kv_layers' search for a KLD limit (the budget times the margin), with kld_of measuring a
// choice on the calibration text: at most 6 distinct choices measured, plus the largest candidate
// everywhere when none of them was within the limit.
KvAutoChoice search_kv_choice(const KvAutoMeasurement& m, const KvCacheShape& base, double limit,
                              const std::function<double(const KvAutoChoice&)>& kld_of);

}  // namespace tq
