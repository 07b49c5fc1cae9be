#include "eval/kl_divergence.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "errors/error.h"
#include "kv/block_pool.h"

namespace tq {

std::vector<float> window_log_probs(Transformer& model, KvCache& cache, const TokenId* ids, int ctx, int chunk,
                                    LayerInputs* record, const LayerInputs* resume, int first_layer) {
  const int vocab = model.config().vocab_size;
  const int first = ctx / 2, n_scored = ctx - 1 - first;
  const int64_t hidden = model.config().hidden_size;
  if (resume && (first_layer <= 0 || first_layer >= static_cast<int>(resume->size()) ||
                 (*resume)[first_layer].size() < size_t(ctx) * hidden))
    fail("window_log_probs: no recorded states of {} positions entering layer {}", ctx, first_layer);
  BlockPool pool(cache);
  ScopedBlockTable sequence(pool);
  if (!sequence.allocate(ctx)) fail("eval kl: the cache cannot hold a window of {} tokens", ctx);
  const BlockTable& table = sequence.table();
  std::vector<float> out(size_t(n_scored) * vocab), logits;
  if (record) {
    record->assign(model.config().num_layers, {});
    model.set_layer_input_observer([record, hidden](int layer, int n, const float* x) {
      (*record)[layer].insert((*record)[layer].end(), x, x + n * hidden);
    });
  }
  struct ObserverOff {
    Transformer& m;
    bool on;
    ~ObserverOff() {
      if (on) m.set_layer_input_observer({});
    }
  } off{model, record != nullptr};
  for (int start = 0; start < ctx; start += chunk) {
    ForwardBatch batch;
    const int end = std::min(ctx, start + chunk);
    for (int p = start; p < end; ++p) batch.add(ids[p], p, &table, p >= first && p < ctx - 1);
    if (resume) {
      model.forward_from(first_layer, (*resume)[first_layer].data() + start * hidden, batch, cache, logits);
    } else {
      model.forward(batch, cache, logits);
    }
    int row = 0;
    for (int p = start; p < end; ++p) {
      if (p < first || p >= ctx - 1) continue;
      std::copy_n(logits.data() + size_t(row) * vocab, vocab, out.data() + size_t(p - first) * vocab);
      ++row;
    }
  }
#pragma omp parallel for schedule(static)
  for (int r = 0; r < n_scored; ++r) {
    float* l = out.data() + size_t(r) * vocab;
    const float mx = *std::max_element(l, l + vocab);
    double sum = 0;
    for (int i = 0; i < vocab; ++i) sum += std::exp(double(l[i]) - mx);
    const float lse = static_cast<float>(mx + std::log(sum));
    for (int i = 0; i < vocab; ++i) l[i] -= lse;
  }
  return out;
}

std::vector<double> row_klds(const std::vector<float>& ref, const std::vector<float>& got, int vocab) {
  const int rows = static_cast<int>(ref.size() / vocab);
  if (got.size() != ref.size()) fail("KL divergence of {} against {} log-probabilities", ref.size(), got.size());
  std::vector<double> out(rows);
#pragma omp parallel for schedule(static)
  for (int r = 0; r < rows; ++r) {
    const float* a = ref.data() + size_t(r) * vocab;
    const float* b = got.data() + size_t(r) * vocab;
    double kl = 0;
    for (int i = 0; i < vocab; ++i) kl += std::exp(double(a[i])) * (double(a[i]) - b[i]);
    out[r] = std::max(0.0, kl);
  }
  return out;
}

double mean_kld(const std::vector<float>& ref, const std::vector<float>& got, int vocab) {
  const std::vector<double> kl = row_klds(ref, got, vocab);
  if (kl.empty()) fail("mean KL divergence of no positions");
  double sum = 0;
  for (double v : kl) sum += v;
  return sum / kl.size();
}

namespace {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

}  // namespace

KlEvalResult run_kl_eval(Transformer& model, const std::vector<TokenId>& ids, const std::string& reference,
                         const std::vector<std::string>& modes, const CacheFactory& make_cache,
                         const KlEvalOptions& o, const std::function<void(const std::string&)>& progress) {
  if (o.ctx < 4) fail("eval kl: --ctx {} is too small (at least 4)", o.ctx);
  if (o.chunk < 1) fail("eval kl: prefill chunk {} must be positive", o.chunk);
  int windows = static_cast<int>(ids.size()) / o.ctx;
  if (o.max_windows > 0) windows = std::min(windows, o.max_windows);
  if (windows < 1) fail("eval kl: the text has {} tokens, fewer than one window of --ctx {}", ids.size(), o.ctx);
  const int vocab = model.config().vocab_size;
  const int first = o.ctx / 2, n_scored = o.ctx - 1 - first;
  const int blocks_needed = (o.ctx + 15) / 16 + 1;

  std::unique_ptr<KvCache> ref_cache = make_cache(reference, blocks_needed);
  std::vector<std::unique_ptr<KvCache>> caches;
  for (const std::string& m : modes) caches.push_back(make_cache(m, blocks_needed));

  KlEvalResult result;
  result.reference = reference;
  result.windows = windows;
  std::vector<std::vector<double>> kld(modes.size());
  std::vector<double> nll(modes.size(), 0.0), agree(modes.size(), 0.0);
  double nll_ref = 0;
  for (int w = 0; w < windows; ++w) {
    const TokenId* win = ids.data() + size_t(w) * o.ctx;
    const std::vector<float> ref = window_log_probs(model, *ref_cache, win, o.ctx, o.chunk);
    std::vector<int> ref_top(n_scored);
    for (int r = 0; r < n_scored; ++r) {
      const float* lp = ref.data() + size_t(r) * vocab;
      ref_top[r] = static_cast<int>(std::max_element(lp, lp + vocab) - lp);
      nll_ref -= lp[win[first + r + 1]];
    }
    for (size_t m = 0; m < modes.size(); ++m) {
      const std::vector<float> got = window_log_probs(model, *caches[m], win, o.ctx, o.chunk);
      const std::vector<double> kl = row_klds(ref, got, vocab);
      std::vector<char> same(n_scored);
      for (int r = 0; r < n_scored; ++r) {
        const float* q = got.data() + size_t(r) * vocab;
        same[r] = (std::max_element(q, q + vocab) - q) == ref_top[r];
      }
      for (int r = 0; r < n_scored; ++r) {
        kld[m].push_back(kl[r]);
        agree[m] += same[r];
        nll[m] -= got[size_t(r) * vocab + win[first + r + 1]];
      }
    }
    if (progress) progress(fmt::format("window {}/{}", w + 1, windows));
  }
  result.tokens = windows * n_scored;
  for (size_t m = 0; m < modes.size(); ++m) {
    KlModeResult r;
    const KvCacheShape& shape = caches[m]->shape();
    r.mode = modes[m];
    r.kv_bytes_per_token = static_cast<size_t>(std::llround(shape.bytes_per_token_at(o.ctx)));
    r.bits_per_element = shape.bits_per_element_at(o.ctx);
    r.windows = shape.windows.describe();
    double sum = 0;
    for (double v : kld[m]) sum += v;
    r.kld_mean = sum / result.tokens;
    r.kld_median = percentile(kld[m], 0.5);
    r.kld_p99 = percentile(kld[m], 0.99);
    r.kld_max = *std::max_element(kld[m].begin(), kld[m].end());
    r.top1 = agree[m] / result.tokens;
    r.ppl = std::exp(nll[m] / result.tokens);
    r.ppl_ref = std::exp(nll_ref / result.tokens);
    result.modes.push_back(r);
  }
  return result;
}

}  // namespace tq
