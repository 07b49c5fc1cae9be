#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "errors/error.h"

namespace tq {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

EngineConfig single_sequence_config(const Transformer& model, const KvCache& cache, int max_model_len,
                                    int prefill_chunk) {
  if (prefill_chunk < 1) fail("the prefill chunk must be at least 1 token (got {})", prefill_chunk);
  EngineConfig config;
  config.max_model_len = std::min(model.config().max_position, cache.num_blocks() * cache.shape().block_size);
  if (max_model_len > 0) config.max_model_len = std::min(config.max_model_len, max_model_len);
  config.scheduler.max_num_batched_tokens = prefill_chunk;
  config.scheduler.max_num_seqs = 1;
  config.enable_prefix_caching = true;
  return config;
}

}  // namespace

Generator::Generator(Transformer& model, KvCache& cache, const Tokenizer* tokenizer, std::vector<TokenId> stop_ids,
                     int max_model_len, int prefill_chunk)
    : engine_(model, cache, tokenizer, std::move(stop_ids),
              single_sequence_config(model, cache, max_model_len, prefill_chunk)) {}

GenerationOutput Generator::generate(const std::vector<TokenId>& prompt, const SamplingParams& params,
                                     const std::function<void(const std::string&)>& on_text) {
  const uint64_t id = next_id_++;
  engine_.add_request(std::make_unique<Request>(id, prompt, params));
  GenerationOutput out;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point first_token;
  try {
    while (engine_.has_work()) {
      const uint64_t steps = engine_.stats().steps;
      std::vector<RequestOutput> outputs = engine_.step();
      if (engine_.stats().steps == steps)  // nothing could be scheduled: the request does not fit
        fail("the KV cache is too small for this request ({} tokens so far)", prompt.size() + out.ids.size());
      for (RequestOutput& step : outputs) {
        if (out.ids.empty() && !step.new_ids.empty()) first_token = std::chrono::steady_clock::now();
        out.ids.insert(out.ids.end(), step.new_ids.begin(), step.new_ids.end());
        for (SampleResult& lp : step.new_logprobs) out.logprobs.push_back(std::move(lp));
        if (!step.new_text.empty()) {
          out.text += step.new_text;
          if (on_text) on_text(step.new_text);
        }
        if (step.finish != FinishReason::none) out.finish_reason = finish_reason_name(step.finish);
      }
    }
  } catch (...) {
    engine_.abort_request(id);  // its blocks go back; the engine stays usable
    throw;
  }
  out.prefill_seconds = std::chrono::duration<double>(first_token - start).count();
  out.decode_seconds = seconds_since(first_token);
  return out;
}

}  // namespace tq
