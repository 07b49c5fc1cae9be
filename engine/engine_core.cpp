#include "engine/engine_core.h"

#include <algorithm>

#include "errors/error.h"
#include "model/token_ids.h"

namespace tq {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::abort: return "abort";
    case FinishReason::error: return "error";
  }
  return "";
}

Request::Request(uint64_t id_, std::vector<TokenId> prompt, SamplingParams params_, int prompt_logprobs_)
    : id(id_),
      tokens(std::move(prompt)),
      num_prompt_tokens(static_cast<int>(tokens.size())),
      params(std::move(params_)),
      prompt_logprobs(prompt_logprobs_),
      sampler(params) {
  timing.arrival = RequestTiming::Clock::now();
}

EngineCore::EngineCore(Transformer& model, KvCache& cache, const Tokenizer* tokenizer, std::vector<TokenId> eos_ids,
                       const EngineConfig& config)
    : model_(model),
      cache_(cache),
      tokenizer_(tokenizer),
      eos_ids_(std::move(eos_ids)),
      config_(config),
      // With a prefill chunk's own rows exact (--kv-chunk-rows exact) a token's result depends on
      // where its chunk starts, so a prefix hit would not equal computing the prefix.
      pool_(cache, config.enable_prefix_caching && !cache.options().exact_chunk_rows),
      scheduler_(config.scheduler, pool_) {
  pool_.check_serving_windows();
  pool_.record_events(config.kv_events);
  const int pool_tokens = cache.num_blocks() * cache.shape().block_size;
  if (config_.max_model_len <= 0) config_.max_model_len = std::min(model.config().max_position, pool_tokens);
  if (config_.max_model_len > pool_tokens)
    fail("max_model_len {} exceeds the {} tokens the KV cache holds", config_.max_model_len, pool_tokens);
}

void EngineCore::add_request(std::unique_ptr<Request> r) {
  const int vocab = model_.config().vocab_size;
  if (r->num_prompt_tokens == 0) fail("the prompt is empty: give at least one token");
  for (TokenId id : r->prompt())
    if (!token_id_in_vocab(id, vocab)) fail("{}", token_id_outside_vocab("prompt token id", id, vocab));
  if (r->num_prompt_tokens >= config_.max_model_len)
    fail("the prompt has {} tokens but the context length is {}: it must leave room for at least one new token",
         r->num_prompt_tokens, config_.max_model_len);
  if (r->prompt_logprobs > SamplingParams::kMaxLogprobs)
    fail("prompt logprobs {} is more than the maximum {}", r->prompt_logprobs, SamplingParams::kMaxLogprobs);
  if (requests_.count(r->id)) fail("request id {} is already in the engine", r->id);
  if (tokenizer_) {
    const auto prompt = r->prompt();
    const bool after_text =
        std::any_of(prompt.begin(), prompt.end(), [&](TokenId id) { return !tokenizer_->is_special(id); });
    r->decoder.emplace(*tokenizer_, /*skip_special=*/true, /*continues_text=*/after_text);
    r->stops.emplace(r->params.stop);
  }
  if (r->params.constraint) r->constraint.emplace(r->params.constraint);
  counters_.prompt_tokens += r->num_prompt_tokens;
  Request* raw = r.get();
  requests_.emplace(r->id, std::move(r));
  scheduler_.add(raw);
}

bool EngineCore::abort_request(uint64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  scheduler_.remove(it->second.get());
  requests_.erase(it);
  return true;
}

void EngineCore::finish(Request& r, FinishReason reason, bool flush_text, RequestOutput& out) {
  if (r.decoder && flush_text) {
    // Text held back for a possible stop string is output after all.
    const StopMatchResult m = r.stops->push(r.decoder->flush());
    out.new_text += m.text;
    if (!m.stopped) out.new_text += r.stops->flush();
  }
  r.status = RequestStatus::finished;
  r.finish = reason;
  out.finish = reason;
}

void EngineCore::sample_next(Request& r, const float* logits, RequestOutput& out) {
  const int vocab = model_.config().vocab_size;
  SampleResult extra;
  const bool want = r.params.logprobs >= 0;
  if (r.constraint) {
    // Only tokens that keep the output a prefix of a valid answer may be drawn.
    constrained_logits_.assign(logits, logits + vocab);
    r.constraint->mask(constrained_logits_);
    logits = constrained_logits_.data();
  }
  const TokenId id = r.sampler.sample(std::span(logits, size_t(vocab)), r.prompt(), r.output(), want ? &extra : nullptr);
  if (r.constraint && !r.constraint->accept(id)) {
    out.error = "the structured-output constraint allows no next token";
    finish(r, FinishReason::error, true, out);
    return;
  }
  r.tokens.push_back(id);
  ++counters_.generation_tokens;
  const auto now = RequestTiming::Clock::now();
  if (!r.timing.first_token) r.timing.first_token = now;
  r.timing.last_token = now;
  out.new_ids.push_back(id);
  if (want) out.new_logprobs.push_back(std::move(extra));
  if (is_stop_token(id, r.params, eos_ids_)) {
    // The stop token is reported but not part of the text; pending text is flushed.
    finish(r, FinishReason::stop, true, out);
    return;
  }
  if (r.decoder) {
    const StopMatchResult m = r.stops->push(r.decoder->push(id));
    out.new_text += m.text;
    if (m.stopped) {
      finish(r, FinishReason::stop, false, out);
      return;
    }
  }
  if (r.constraint && r.constraint->terminated()) {
    finish(r, FinishReason::stop, true, out);  // the answer is complete (ignore_eos cannot extend it)
    return;
  }
  if (r.num_output_tokens() >= r.params.max_tokens || r.num_tokens() >= config_.max_model_len)
    finish(r, FinishReason::length, true, out);
}

void EngineCore::after_forward(Request& r, int chunk_tokens, const float* rows, int vocab, RequestOutput& out) {
  const int start = r.num_computed;
  r.num_computed += chunk_tokens;
  r.table.num_tokens = r.num_computed;
  pool_.cache_full_blocks(r.tokens, r.num_computed, r.table, r.hashes);
  pool_.release_old_windows(r.table, r.num_computed);
  int row = 0;
  if (r.prompt_logprobs >= 0 && !r.prompt_logprobs_done) {
    // Logits at position i give the logprob of prompt token i + 1.
    r.pending_prompt_logprobs.resize(r.num_prompt_tokens);
    for (int i = start; i < std::min(r.num_computed, r.num_prompt_tokens - 1); ++i, ++row) {
      Sampler::fill_logprobs(std::span(rows + size_t(row) * vocab, size_t(vocab)), r.tokens[i + 1],
                             r.prompt_logprobs, r.pending_prompt_logprobs[i + 1]);
    }
    if (r.num_computed >= r.num_prompt_tokens) {
      out.prompt_logprobs = std::move(r.pending_prompt_logprobs);
      r.prompt_logprobs_done = true;
    }
  }
  if (r.num_computed == r.num_tokens()) sample_next(r, rows + size_t(row) * vocab, out);
}

std::vector<RequestOutput> EngineCore::step() {
  std::vector<RequestOutput> outputs;
  const SchedulerOutput plan = scheduler_.schedule();
  counters_.preemptions += plan.preempted.size();
  if (plan.empty()) return outputs;
  ++counters_.steps;

  // One batch: every scheduled token of every request, with the rows whose logits are needed.
  ForwardBatch batch;
  std::vector<int> first_row(plan.chunks.size());
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    const Request& r = *plan.chunks[c].request;
    const int start = r.num_computed, end = start + plan.chunks[c].num_tokens;
    const bool prompt_rows = r.prompt_logprobs >= 0 && !r.prompt_logprobs_done;
    first_row[c] = static_cast<int>(batch.logit_rows.size());
    for (int i = start; i < end; ++i) {
      const bool sample = i == r.num_tokens() - 1;
      batch.add(r.tokens[i], i, &r.table, sample || (prompt_rows && i < r.num_prompt_tokens - 1));
    }
  }
  model_.forward(batch, cache_, logits_);

  const int vocab = model_.config().vocab_size;
  for (size_t c = 0; c < plan.chunks.size(); ++c) {
    Request& r = *plan.chunks[c].request;
    RequestOutput out;
    out.id = r.id;
    after_forward(r, plan.chunks[c].num_tokens, logits_.data() + size_t(first_row[c]) * vocab, vocab, out);
    if (out.new_ids.empty() && out.prompt_logprobs.empty() && out.finish == FinishReason::none) continue;
    out.num_prompt_tokens = r.num_prompt_tokens;
    out.num_cached_tokens = r.num_cached_tokens;
    out.num_output_tokens = r.num_output_tokens();
    outputs.push_back(std::move(out));
    if (r.finished()) {
      scheduler_.remove(&r);
      requests_.erase(r.id);
    }
  }
  return outputs;
}

EngineStats EngineCore::stats() const {
  EngineStats s = counters_;
  s.num_running = scheduler_.num_running();
  s.num_waiting = scheduler_.num_waiting();
  s.num_blocks = pool_.num_blocks();
  s.block_size = pool_.block_size();
  s.prefix_caching = pool_.prefix_caching();
  s.blocks_in_use = pool_.num_blocks() - pool_.num_free();
  s.kv_usage = pool_.usage();
  s.prefix = pool_.stats();
  return s;
}

void EngineCore::check_consistency() const {
  const std::vector<const BlockTable*> tables = scheduler_.tables();
  pool_.check_consistency(tables);
}

}  // namespace tq
