#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "errors/error.h"
#include "model/token_ids.h"

namespace tq {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Total order used for every rank-based decision: higher logit first, equal logits -> lower id.
// A total order keeps top-k / top-p / logprob rankings deterministic across std implementations.
template <typename T>
bool ranks_before(const T& a, const T& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

void check_token_id(int32_t id, size_t vocab, const char* which) {
  if (!token_id_in_vocab(id, static_cast<int64_t>(vocab)))
    fail("{}", token_id_outside_vocab(std::string(which) + " token id", id, static_cast<int64_t>(vocab)));
}

// Argmax with ties going to the lowest id (strict '>' keeps the first maximum). No sort.
int32_t argmax(std::span<const float> logits) {
  float best = kNegInf;
  int32_t best_id = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float x = logits[i];
    if (x > best) {
      best = x;
      best_id = static_cast<int32_t>(i);
    } else if (std::isnan(x)) {
      fail("sampler: logit of token {} is NaN (model produced non-finite logits)", i);
    }
  }
  if (best_id < 0) fail("sampler: every logit is -inf, no token can be chosen");
  return best_id;
}

}  // namespace

void SamplingParams::validate() const {
  // Comparisons are written so that NaN fails them.
  if (!(std::isfinite(temperature) && temperature >= 0.0f)) {
    fail("sampling parameter temperature must be a finite number >= 0 (0 = greedy), got {}",
         temperature);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    fail("sampling parameter top_p must be in (0, 1], got {}", top_p);
  }
  if (top_k < -1) {
    fail("sampling parameter top_k must be 0 or -1 (disabled) or at least 1, got {}", top_k);
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    fail("sampling parameter min_p must be in [0, 1], got {}", min_p);
  }
  if (!(std::isfinite(repetition_penalty) && repetition_penalty > 0.0f)) {
    fail("sampling parameter repetition_penalty must be a finite number > 0 (1 = off), got {}",
         repetition_penalty);
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    fail("sampling parameter presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    fail("sampling parameter frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  for (const auto& [id, bias] : logit_bias)
    if (!(bias >= -100.0f && bias <= 100.0f)) fail("logit_bias for token {} must be in [-100, 100], got {}", id, bias);
  if (max_tokens < 1) {
    fail("sampling parameter max_tokens must be at least 1, got {}", max_tokens);
  }
  if (logprobs < -1 || logprobs > kMaxLogprobs) {
    fail("sampling parameter logprobs must be in [-1, {}] (-1 = none), got {}", kMaxLogprobs,
         logprobs);
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) fail("sampling parameter stop[{}] is an empty string", i);
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    if (stop_token_ids[i] < 0) {
      fail("sampling parameter stop_token_ids[{}] must be >= 0, got {}", i, stop_token_ids[i]);
    }
  }
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, const SamplingParams& params,
                     PenaltyScratch& scratch) {
  const bool repetition = params.repetition_penalty != 1.0f;
  const bool additive = params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  if (!repetition && !additive) return;

  const size_t vocab = logits.size();
  // Every id is checked before any scratch entry is marked: a throw half-way through marking
  // would leave stale entries in the scratch, which later calls would wrongly penalise.
  if (repetition) {
    for (int32_t id : prompt_ids) check_token_id(id, vocab, "prompt");
  }
  for (int32_t id : output_ids) check_token_id(id, vocab, "output");

  if (scratch.seen.size() != vocab) {
    scratch.seen.assign(vocab, 0);
    scratch.output_counts.assign(vocab, 0);
    scratch.touched_ids.clear();
  }

  if (repetition) {
    const float penalty = params.repetition_penalty;
    auto mark = [&](int32_t id) {
      if (!scratch.seen[id]) {
        scratch.seen[id] = 1;
        scratch.touched_ids.push_back(id);
      }
    };
    for (int32_t id : prompt_ids) mark(id);
    for (int32_t id : output_ids) mark(id);
    for (int32_t id : scratch.touched_ids) {
      float& logit = logits[id];
      // Dividing a positive logit and multiplying a negative one both lower the probability
      // for penalty > 1 (CTRL paper / HF / vLLM convention).
      logit = logit > 0.0f ? logit / penalty : logit * penalty;
      scratch.seen[id] = 0;
    }
    scratch.touched_ids.clear();
  }

  if (additive) {
    for (int32_t id : output_ids) {
      if (scratch.output_counts[id]++ == 0) scratch.touched_ids.push_back(id);
    }
    for (int32_t id : scratch.touched_ids) {
      // Two separate subtractions, as vLLM does them, so results match bit for bit in fp32.
      logits[id] -= params.frequency_penalty * static_cast<float>(scratch.output_counts[id]);
      logits[id] -= params.presence_penalty;
      scratch.output_counts[id] = 0;
    }
    scratch.touched_ids.clear();
  }
}

void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt_ids,
                     std::span<const int32_t> output_ids, const SamplingParams& params) {
  PenaltyScratch scratch;
  apply_penalties(logits, prompt_ids, output_ids, params, scratch);
}

Sampler::Sampler(SamplingParams params) : params_(std::move(params)) {
  params_.validate();
  if (params_.seed) {
    rng_.seed(*params_.seed);
  } else {
    std::random_device device;
    const uint64_t seed = (static_cast<uint64_t>(device()) << 32) ^ device();
    rng_.seed(seed);
  }
}

double Sampler::next_uniform() {
  // The top 53 bits of the raw 64-bit output, scaled into [0, 1). std::uniform_real_distribution
  // is implementation-defined, so it would break cross-platform reproducibility.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

std::span<float> Sampler::processed_logits(std::span<const float> logits,
                                           std::span<const int32_t> prompt_ids,
                                           std::span<const int32_t> output_ids) {
  processed_logits_.assign(logits.begin(), logits.end());
  // OpenAI's logit_bias, before the penalties as vLLM applies its logits processors.
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id < 0 || size_t(id) >= processed_logits_.size())
      fail("logit_bias token id {} is outside the vocabulary of {} tokens", id, processed_logits_.size());
    processed_logits_[size_t(id)] += bias;
  }
  apply_penalties(processed_logits_, prompt_ids, output_ids, params_, penalty_scratch_);
  return processed_logits_;
}

void Sampler::build_candidates(std::span<float> processed) {
  // Temperature: divide (not multiply by the reciprocal) to match vLLM's rounding.
  const float temperature = params_.temperature;
  float max_logit = kNegInf;
  for (size_t i = 0; i < processed.size(); ++i) {
    float& x = processed[i];
    if (std::isnan(x)) {
      fail("sampler: logit of token {} is NaN (model produced non-finite logits)", i);
    }
    x /= temperature;
    max_logit = std::max(max_logit, x);
  }
  if (max_logit == kNegInf) fail("sampler: every logit is -inf, no token can be chosen");
  if (std::isinf(max_logit)) fail("sampler: a logit is +inf after temperature scaling");

  // min-p: keep p_i >= min_p * p_max  <=>  z_i >= z_max + ln(min_p). Tested in logit space so
  // rejected tokens never pay for an exp. Tokens at -inf are masked out in every case.
  const float min_logit = params_.min_p > 0.0f ? max_logit + std::log(params_.min_p)
                                               : -std::numeric_limits<float>::max();
  const auto weight_of = [max_logit](float z) { return std::exp(z - max_logit); };

  const size_t top_k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : 0;
  candidates_.clear();
  bool rank_ordered = false;  // is candidates_ sorted by rank?
  if (top_k > 0 && top_k < processed.size()) {
    if (top_k <= kHeapTopKLimit) {
      // Bounded heap: one pass over the vocabulary, O(vocab) comparisons for small k. With
      // by_rank as the heap's "less", the front is the worst token kept so far.
      candidates_.reserve(top_k);
      for (size_t i = 0; i < processed.size(); ++i) {
        const Candidate candidate{processed[i], static_cast<int32_t>(i), 0.0f};
        if (!(candidate.logit >= min_logit)) continue;
        if (candidates_.size() < top_k) {
          candidates_.push_back(candidate);
          std::push_heap(candidates_.begin(), candidates_.end(), by_rank);
        } else if (by_rank(candidate, candidates_.front())) {
          std::pop_heap(candidates_.begin(), candidates_.end(), by_rank);
          candidates_.back() = candidate;
          std::push_heap(candidates_.begin(), candidates_.end(), by_rank);
        }
      }
    } else {
      for (size_t i = 0; i < processed.size(); ++i) {
        if (processed[i] >= min_logit) {
          candidates_.push_back({processed[i], static_cast<int32_t>(i), 0.0f});
        }
      }
      if (candidates_.size() > top_k) {
        const auto kth = candidates_.begin() + static_cast<std::ptrdiff_t>(top_k);
        std::nth_element(candidates_.begin(), kth, candidates_.end(), by_rank);
        candidates_.resize(top_k);
      }
    }
    // Heap / nth_element arrangements are unspecified; sorting under a total order is not, so the
    // draw order is the same on every platform.
    std::sort(candidates_.begin(), candidates_.end(), by_rank);
    for (Candidate& c : candidates_) c.weight = weight_of(c.logit);
    rank_ordered = true;
  } else {
    // Token id order: the draw order when nothing truncates by rank.
    for (size_t i = 0; i < processed.size(); ++i) {
      const float z = processed[i];
      if (z >= min_logit) candidates_.push_back({z, static_cast<int32_t>(i), weight_of(z)});
    }
  }

  // top-p: keep the smallest rank prefix whose mass reaches top_p of what is left (vLLM drops a
  // token when the mass ranked below-and-including it is <= 1 - top_p, i.e. keeps it while the
  // mass ranked strictly above it is < top_p).
  if (params_.top_p < 1.0f) {
    double total = 0.0;
    for (const Candidate& c : candidates_) total += c.weight;
    const double target = static_cast<double>(params_.top_p) * total;
    size_t keep = candidates_.size();  // if rounding never lets the sum reach target, keep all
    if (rank_ordered) {
      double cumulative = 0.0;
      for (size_t i = 0; i < candidates_.size(); ++i) {
        cumulative += candidates_[i].weight;
        if (cumulative >= target) {
          keep = i + 1;
          break;
        }
      }
    } else {
      // Pre-filter: the tokens lighter than (1 - top_p) * total / n together weigh less than
      // (1 - top_p) * total, and they form a rank suffix, so all of them fall outside the kept
      // prefix. On real (peaked) logits this removes most of the vocabulary before the
      // quickselect. erase_if keeps the order, so it stays deterministic.
      const double negligible = (1.0 - static_cast<double>(params_.top_p)) * total /
                                static_cast<double>(candidates_.size());
      std::erase_if(candidates_,
                    [negligible](const Candidate& c) { return c.weight < negligible; });
      keep = top_p_prefix(target);
    }
    candidates_.resize(keep);
  }
}

size_t Sampler::top_p_prefix(double target) {
  // Weighted quickselect: O(n) expected instead of sorting the vocabulary, which a flat
  // distribution with top_p = 0.95 would otherwise need. Invariant: [0, lo) are kept (all rank
  // before [lo, hi)), and `remaining` is the mass still needed from [lo, hi). Everything here is
  // our own deterministic code (no std::nth_element), so the kept prefix and its order are the
  // same on every platform.
  size_t lo = 0;
  size_t hi = candidates_.size();
  double remaining = target;
  while (hi - lo > kTopPSortBelow) {
    // Median-of-three pivot by rank, moved to hi - 1; Lomuto partition. The order is total, so
    // the pivot is unique and each round removes at least the pivot.
    const size_t mid = lo + (hi - lo) / 2;
    size_t a = lo, b = mid, c = hi - 1;
    if (by_rank(candidates_[b], candidates_[a])) std::swap(a, b);
    if (by_rank(candidates_[c], candidates_[b])) std::swap(b, c);
    if (by_rank(candidates_[b], candidates_[a])) std::swap(a, b);
    std::swap(candidates_[b], candidates_[hi - 1]);
    const Candidate pivot = candidates_[hi - 1];
    size_t store = lo;
    double better_mass = 0.0;
    for (size_t i = lo; i + 1 < hi; ++i) {
      if (by_rank(candidates_[i], pivot)) {
        better_mass += candidates_[i].weight;
        std::swap(candidates_[i], candidates_[store++]);
      }
    }
    std::swap(candidates_[store], candidates_[hi - 1]);  // pivot lands at `store`
    if (better_mass >= remaining) {
      hi = store;  // non-empty: remaining > 0
    } else if (better_mass + pivot.weight >= remaining) {
      return store + 1;
    } else {
      remaining -= better_mass + pivot.weight;
      lo = store + 1;
    }
  }
  std::sort(candidates_.begin() + static_cast<std::ptrdiff_t>(lo),
            candidates_.begin() + static_cast<std::ptrdiff_t>(hi), by_rank);
  double cumulative = 0.0;
  for (size_t i = lo; i < hi; ++i) {
    cumulative += candidates_[i].weight;
    if (cumulative >= remaining) return i + 1;
  }
  return hi;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> prompt_ids,
                        std::span<const int32_t> output_ids, SampleResult* extra) {
  if (logits.empty()) fail("sampler: logits are empty (vocabulary size 0)");
  int32_t chosen = -1;
  if (params_.is_greedy()) {
    const bool penalized = params_.repetition_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                           params_.presence_penalty != 0.0f || !params_.logit_bias.empty();
    // Without penalties or biases the argmax reads the caller's logits directly: no copy, no sort.
    chosen = penalized ? argmax(processed_logits(logits, prompt_ids, output_ids)) : argmax(logits);
  } else {
    build_candidates(processed_logits(logits, prompt_ids, output_ids));
    // Inverse-CDF draw over the kept tokens, summing in the same order as the scan so that the
    // final cumulative sum equals total exactly.
    double total = 0.0;
    for (const Candidate& c : candidates_) total += c.weight;
    const double threshold = next_uniform() * total;
    double cumulative = 0.0;
    for (const Candidate& c : candidates_) {
      cumulative += c.weight;
      if (threshold < cumulative) {
        chosen = c.id;
        break;
      }
    }
    if (chosen < 0) {
      // threshold rounded up to total: take the last token that has any mass (the max always does).
      for (auto it = candidates_.rbegin(); it != candidates_.rend(); ++it) {
        if (it->weight > 0.0) {
          chosen = it->id;
          break;
        }
      }
    }
  }
  if (extra) fill_logprobs(logits, chosen, std::max(params_.logprobs, 0), *extra);
  return chosen;
}

std::vector<TokenProbability> Sampler::distribution(std::span<const float> logits,
                                                    std::span<const int32_t> prompt_ids,
                                                    std::span<const int32_t> output_ids) {
  if (logits.empty()) fail("sampler: logits are empty (vocabulary size 0)");
  std::span<float> processed = processed_logits(logits, prompt_ids, output_ids);
  if (params_.is_greedy()) return {{argmax(processed), 1.0}};
  build_candidates(processed);
  double total = 0.0;
  for (const Candidate& c : candidates_) total += c.weight;
  std::vector<TokenProbability> result;
  result.reserve(candidates_.size());
  for (const Candidate& c : candidates_) result.push_back({c.id, c.weight / total});
  return result;
}

void Sampler::fill_logprobs(std::span<const float> raw_logits, int32_t chosen, int num_top,
                            SampleResult& extra) {
  // log_softmax in double: logprob_i = x_i - (max + log(sum exp(x - max))).
  float max_logit = kNegInf;
  for (float x : raw_logits) max_logit = std::max(max_logit, x);
  double sum = 0.0;
  for (float x : raw_logits) sum += std::exp(x - max_logit);  // float exp: ~3x cheaper, ample here
  const double log_normalizer = static_cast<double>(max_logit) + std::log(sum);
  extra.logprob = static_cast<float>(static_cast<double>(raw_logits[chosen]) - log_normalizer);

  // Top alternatives by a bounded heap (k <= 20): one pass, no sort of the vocabulary.
  // With ranks_before as the heap's "less", the heap front is the worst of the kept ones.
  struct Ranked {
    float logit;
    int32_t id;
  };
  const auto by_rank = [](const Ranked& a, const Ranked& b) { return ranks_before(a, b); };
  std::vector<Ranked> heap;
  heap.reserve(static_cast<size_t>(num_top));
  const size_t k = static_cast<size_t>(num_top);
  for (size_t i = 0; i < raw_logits.size() && k > 0; ++i) {
    const Ranked candidate{raw_logits[i], static_cast<int32_t>(i)};
    if (heap.size() < k) {
      heap.push_back(candidate);
      std::push_heap(heap.begin(), heap.end(), by_rank);
    } else if (by_rank(candidate, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), by_rank);
      heap.back() = candidate;
      std::push_heap(heap.begin(), heap.end(), by_rank);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), by_rank);  // best first
  extra.top.clear();
  extra.top.reserve(heap.size());
  for (const Ranked& r : heap) {
    extra.top.emplace_back(r.id, static_cast<float>(static_cast<double>(r.logit) - log_normalizer));
  }
}

}  // namespace tq
