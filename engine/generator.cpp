#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/stop_matcher.h"
#include "errors/error.h"
#include "model/token_ids.h"

namespace tq {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Generator(Transformer& model, KvCache& cache, const Tokenizer* tokenizer, std::vector<TokenId> stop_ids,
                     int max_model_len, int prefill_chunk)
    : model_(model),
      cache_(cache),
      tokenizer_(tokenizer),
      stop_ids_(std::move(stop_ids)),
      max_model_len_(max_model_len),
      prefill_chunk_(prefill_chunk) {}

int Generator::context_length() const {
  const int cache_tokens = cache_.num_blocks() * cache_.shape().block_size;
  int limit = std::min(model_.config().max_position, cache_tokens);
  if (max_model_len_ > 0) limit = std::min(limit, max_model_len_);
  return limit;
}

GenerationOutput Generator::generate(const std::vector<TokenId>& prompt, const SamplingParams& params,
                                     const std::function<void(const std::string&)>& on_text) {
  params.validate();
  const int vocab = model_.config().vocab_size;
  const int n_ctx = context_length();
  if (prompt.empty()) fail("the prompt is empty: give at least one token");
  for (TokenId id : prompt)
    if (!token_id_in_vocab(id, vocab)) fail("{}", token_id_outside_vocab("prompt token id", id, vocab));
  if (static_cast<int>(prompt.size()) >= n_ctx)
    fail("the prompt has {} tokens but the context length is {}: it must leave room for at least one new token",
         prompt.size(), n_ctx);

  GenerationOutput out;
  BlockTable table;
  Sampler sampler(params);
  std::optional<StreamDecoder> decoder;
  if (tokenizer_) {
    const bool after_text = std::any_of(prompt.begin(), prompt.end(), [&](TokenId id) { return !tokenizer_->is_special(id); });
    decoder.emplace(*tokenizer_, /*skip_special=*/true, /*continues_text=*/after_text);
  }
  StopMatcher stops(params.stop);
  std::vector<float> logits;
  auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    out.text += piece;
    if (on_text) on_text(piece);
  };

  struct TableGuard {  // the blocks go back to the pool however generation ends
    KvCache& cache;
    BlockTable& table;
    ~TableGuard() { cache.release(table); }
  } guard{cache_, table};

  // Prefill in chunks; only the last prompt token's logits are needed.
  const auto t_prefill = std::chrono::steady_clock::now();
  if (!cache_.reserve(table, static_cast<int>(prompt.size()))) fail("the KV cache is too small for this prompt");
  for (size_t start = 0; start < prompt.size(); start += prefill_chunk_) {
    const size_t end = std::min(prompt.size(), start + static_cast<size_t>(prefill_chunk_));
    ForwardBatch batch;
    for (size_t i = start; i < end; ++i)
      batch.add(prompt[i], static_cast<int32_t>(i), &table, i + 1 == prompt.size());
    model_.forward(batch, cache_, logits);
  }
  table.num_tokens = static_cast<int>(prompt.size());
  out.prefill_seconds = seconds_since(t_prefill);

  const auto t_decode = std::chrono::steady_clock::now();
  const int max_new = std::min(params.max_tokens, n_ctx - static_cast<int>(prompt.size()));
  out.finish_reason = "length";
  bool stop_string_hit = false;
  while (static_cast<int>(out.ids.size()) < max_new) {
    SampleResult extra;
    const TokenId id = sampler.sample(logits, prompt, out.ids, params.logprobs >= 0 ? &extra : nullptr);
    if (params.logprobs >= 0) out.logprobs.push_back(std::move(extra));
    out.ids.push_back(id);
    const bool stop_token = is_stop_token(id, params, stop_ids_);
    if (stop_token) {
      out.finish_reason = "stop";
      break;
    }
    if (tokenizer_) {
      const StopMatchResult r = stops.push(decoder->push(id));
      emit(r.text);
      if (r.stopped) {
        out.finish_reason = "stop";
        stop_string_hit = true;
        break;
      }
    }
    if (static_cast<int>(out.ids.size()) >= max_new) break;
    const int position = table.num_tokens;
    if (!cache_.reserve(table, position + 1)) fail("the KV cache ran out of blocks at {} tokens", position);
    ForwardBatch batch;
    batch.add(id, position, &table, true);
    model_.forward(batch, cache_, logits);
    table.num_tokens = position + 1;
  }
  if (tokenizer_ && !stop_string_hit) {  // text held back for a possible stop string is still output
    const StopMatchResult r = stops.push(decoder->flush());
    emit(r.text);
    if (!r.stopped) emit(stops.flush());
  }
  out.decode_seconds = seconds_since(t_decode);
  return out;
}

}  // namespace tq
