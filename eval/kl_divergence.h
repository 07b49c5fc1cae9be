// `tqserve eval kl`: how far a quantized KV cache moves the model's next-token distribution from
// a full-precision reference. The text is cut into windows of `ctx` tokens; each window is
// prefilled (in chunks) once per mode, and every position in the second half of a window is
// scored, so it attends to the mode's stored K/V of at least ctx/2 earlier positions (and of
// itself: rows are written before they are read, as in serving). Per mode: KL(P_ref || P_mode)
// mean / median / p99 over scored positions, top-1 agreement with the reference, and the
// perplexity of the text's next tokens.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "model/transformer.h"

namespace tq {

struct KlModeResult {
  std::string mode;
  double bits_per_element = 0;   // stored bits per K/V element, scales and norms included
  size_t kv_bytes_per_token = 0;  // at the window length, full-precision windows included (KvCacheShape::bytes_per_token_at)
  std::string windows = "none";    // KvWindows::describe()
  double kld_mean = 0, kld_median = 0, kld_p99 = 0, kld_max = 0;
  double top1 = 0;  // share of scored positions whose argmax equals the reference's
  double ppl = 0, ppl_ref = 0;
};

struct KlEvalResult {
  std::string reference;
  int tokens = 0;  // scored positions
  int windows = 0;
  std::vector<KlModeResult> modes;
};

struct KlEvalOptions {
  int ctx = 1024;
  int chunk = 256;  // prefill chunk
  int max_windows = 0;  // 0: every full window of the text
};

// Hidden states entering each layer over a window's positions: [layer][ctx * hidden].
using LayerInputs = std::vector<std::vector<float>>;

// Runs one window of `ctx` tokens through `cache` (prefill chunks of `chunk`) and returns the
// log-softmax of every scored position: [n_scored, vocab], scored = positions [ctx/2, ctx - 1).
// record: also keeps the hidden states entering every layer. resume (with first_layer > 0): runs
// only layers first_layer.. on the states recorded by an earlier run of the same window whose
// cache held the same rows in the layers before (Transformer::forward_from; the same results).
std::vector<float> window_log_probs(Transformer& model, KvCache& cache, const TokenId* ids, int ctx, int chunk,
                                    LayerInputs* record = nullptr, const LayerInputs* resume = nullptr,
                                    int first_layer = 0);
// KL(ref || got) of each position (clamped at 0 against rounding), both [positions, vocab]
// log-probabilities; and their mean.
std::vector<double> row_klds(const std::vector<float>& ref, const std::vector<float>& got, int vocab);
double mean_kld(const std::vector<float>& ref, const std::vector<float>& got, int vocab);

// Builds a cache of the given mode with room for `num_blocks` blocks.
using CacheFactory = std::function<std::unique_ptr<KvCache>(const std::string& mode, int num_blocks)>;

// Fails when the text has fewer than ctx + 1 tokens or ctx < 4.
KlEvalResult run_kl_eval(Transformer& model, const std::vector<TokenId>& ids, const std::string& reference,
                         const std::vector<std::string>& modes, const CacheFactory& make_cache,
                         const KlEvalOptions& options, const std::function<void(const std::string&)>& progress = {});

}  // namespace tq
