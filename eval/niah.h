// `tqserve eval niah`: needle in a haystack. For each context length and depth, a needle fact
// ("The special magic number of <city> is <7 digits>.") is placed at that depth of a haystack of
// real English text, a question asking for it follows, and the model answers greedily; the cell
// counts as found when the answer contains the number. Prompt and answer together are `ctx`
// tokens. Every mode sees exactly the same prompts.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "eval/kl_divergence.h"
#include "tokenizer/tokenizer.h"

namespace tq {

struct NiahCell {
  int ctx = 0;
  double depth = 0;
  bool found = false;
  std::string answer;
};

struct NiahModeResult {
  std::string mode;
  double accuracy = 0;
  std::vector<NiahCell> cells;
};

struct NiahOptions {
  std::vector<int> contexts{1024, 2048, 4096, 8192};
  int depths = 10;  // depths k / depths for k = 0 .. depths-1
  uint64_t seed = 7;
  int answer_tokens = 12;
  int chunk = 512;
};

// haystack: the text the needles hide in (repeated when shorter than the longest context).
// Fails when a context cannot hold the needle and question, or exceeds the model's context.
std::vector<NiahModeResult> run_niah(Transformer& model, const Tokenizer& tokenizer, const std::vector<TokenId>& stop_ids,
                                     const std::string& haystack, const std::vector<std::string>& modes,
                                     const CacheFactory& make_cache, const NiahOptions& options,
                                     const std::function<void(const std::string&)>& progress = {});

}  // namespace tq
