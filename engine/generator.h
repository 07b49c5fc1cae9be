// Offline generation of one sequence: chunked prefill into the paged cache, then decode with
// host-side sampling, streaming complete UTF-8 text with stop strings held back.
// (The serving engine's scheduler batches many sequences; this is the single-stream path of
// `tqserve generate` and `tqserve chat`.)
#pragma once
#include <functional>
#include <string>
#include <vector>

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
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

class Generator {
 public:
  // tokenizer may be null (ids only; text stays empty). stop_ids: the model's EOS/EOT ids.
  // max_model_len: the context limit (0: the model's, bounded by what the cache holds).
  Generator(Transformer& model, KvCache& cache, const Tokenizer* tokenizer, std::vector<TokenId> stop_ids,
            int max_model_len = 0, int prefill_chunk = 512);

  // Throws tq::Error for an empty prompt, ids outside the vocabulary, or a prompt that does not
  // leave room for one new token in the context (the message gives both counts).
  GenerationOutput generate(const std::vector<TokenId>& prompt, const SamplingParams& params,
                            const std::function<void(const std::string&)>& on_text = nullptr);

  int context_length() const;

 private:
  Transformer& model_;
  KvCache& cache_;
  const Tokenizer* tokenizer_;
  std::vector<TokenId> stop_ids_;
  int max_model_len_;
  int prefill_chunk_;
};

}  // namespace tq
