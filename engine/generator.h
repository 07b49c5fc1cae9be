// Offline generation of one sequence at a time (`tqserve generate`, `tqserve chat`, eval niah): a
// thin loop over EngineCore with one request, as vLLM's offline LLM sits on its engine. So the
// CLI runs the serving engine's own validation, chunked prefill, sampling and stop handling, and
// its output is the server's for the same request. Prefix caching stays on, so a chat's next turn
// reuses the blocks of the conversation so far. A Generator is its cache's only user while it
// lives (its prefix cache remembers what the blocks hold).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine/sampler.h"
#include "kv/kv_cache.h"
#include "model/transformer.h"
#include "tokenizer/tokenizer.h"

namespace tq {

struct GenerationOutput {
  std::vector<TokenId> ids;  // generated ids, the stop token included when one ended it
  std::string text;          // decoded text, stop string / stop token excluded
  std::string finish_reason;  // "stop" or "length"
  std::vector<SampleResult> logprobs;  // [ids.size()] when params.logprobs >= 0
  double prefill_seconds = 0;  // until the first token was sampled
  double decode_seconds = 0;   // the rest
};

class Generator {
 public:
  // tokenizer may be null (ids only; text stays empty). stop_ids: the model's EOS/EOT ids.
  // max_model_len: the context limit (0: the model's, bounded by what the cache holds).
  // prefill_chunk: prompt tokens per forward pass.
  Generator(Transformer& model, KvCache& cache, const Tokenizer* tokenizer, std::vector<TokenId> stop_ids,
            int max_model_len = 0, int prefill_chunk = 512);

  // Throws tq::Error for an empty prompt, ids outside the vocabulary, or a prompt that does not
  // leave room for one new token in the context (the message gives both counts).
  GenerationOutput generate(const std::vector<TokenId>& prompt, const SamplingParams& params,
                            const std::function<void(const std::string&)>& on_text = nullptr);

  int context_length() const { return engine_.config().max_model_len; }
  EngineStats stats() const { return engine_.stats(); }

 private:
  EngineCore engine_;
  uint64_t next_id_ = 0;
};

}  // namespace tq
