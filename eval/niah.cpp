#include "eval/niah.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "engine/generator.h"
#include "errors/error.h"

namespace tq {
namespace {

constexpr const char* kCities[] = {"Lisbon", "Nairobi", "Oslo", "Lima", "Hanoi", "Quito", "Tunis", "Riga",
                                   "Dakar", "Perth", "Turin", "Cusco", "Bergen", "Malmo", "Porto", "Split"};

struct Needle {
  std::string city, number;
};

Needle make_needle(uint64_t seed, int ctx, int depth_index) {
  std::mt19937_64 rng(seed * 7919 + ctx * 131 + depth_index);
  Needle n;
  n.city = kCities[rng() % std::size(kCities)];
  n.number = std::to_string(1000000 + rng() % 9000000);
  return n;
}

// Cuts the haystack's tokens at the nearest line break at or before `pos` so the needle sits
// between sentences, not inside a word.
size_t sentence_boundary(const Tokenizer& tok, const std::vector<TokenId>& hay, size_t pos) {
  for (size_t p = pos; p > 0 && pos - p < 64; --p) {
    const std::string piece = tok.decode({hay[p - 1]}, false);
    if (piece.find('\n') != std::string::npos || piece.find(". ") != std::string::npos ||
        (!piece.empty() && piece.back() == '.'))
      return p;
  }
  return pos;
}

}  // namespace

std::vector<NiahModeResult> run_niah(Transformer& model, const Tokenizer& tok, const std::vector<TokenId>& stop_ids,
                                     const std::string& haystack, const std::vector<std::string>& modes,
                                     const CacheFactory& make_cache, const NiahOptions& o,
                                     const std::function<void(const std::string&)>& progress) {
  if (o.depths < 1) fail("eval niah: --depths {} must be at least 1", o.depths);
  if (o.contexts.empty()) fail("eval niah: no --ctx given");
  const int max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
  if (max_ctx > model.config().max_position)
    fail("eval niah: --ctx {} exceeds the model's context length {}", max_ctx, model.config().max_position);
  std::vector<TokenId> hay = tok.encode(haystack, false);
  if (hay.size() < 64) fail("eval niah: the haystack text has only {} tokens", hay.size());
  const std::vector<TokenId> base = hay;
  while (static_cast<int>(hay.size()) < max_ctx) hay.insert(hay.end(), base.begin(), base.end());

  const std::vector<TokenId> bos = tok.encode_prompt("", false);  // just the BOS, when the model uses one
  std::vector<NiahModeResult> results(modes.size());
  for (size_t m = 0; m < modes.size(); ++m) results[m].mode = modes[m];
  for (int ctx : o.contexts) {
    const int blocks = (ctx + 15) / 16 + 1;
    std::vector<std::unique_ptr<KvCache>> caches;
    for (const std::string& mode : modes) caches.push_back(make_cache(mode, blocks));
    for (int di = 0; di < o.depths; ++di) {
      const double depth = double(di) / o.depths;
      const Needle needle = make_needle(o.seed, ctx, di);
      const std::vector<TokenId> needle_ids =
          tok.encode(fmt::format(" The special magic number of {} is {}. ", needle.city, needle.number), false);
      const std::vector<TokenId> question_ids = tok.encode(
          fmt::format("\n\nQuestion: What is the special magic number of {}?\nAnswer: The special magic number of {} is",
                      needle.city, needle.city),
          false);
      const int fixed = static_cast<int>(bos.size() + needle_ids.size() + question_ids.size());
      // Prompt and answer together fill the context.
      const int hay_len = ctx - fixed - o.answer_tokens;
      if (hay_len < 16) fail("eval niah: --ctx {} is too short for the needle and question ({} tokens)", ctx, fixed);
      const size_t cut = sentence_boundary(tok, hay, static_cast<size_t>(depth * hay_len));
      std::vector<TokenId> prompt = bos;
      prompt.insert(prompt.end(), hay.begin(), hay.begin() + cut);
      prompt.insert(prompt.end(), needle_ids.begin(), needle_ids.end());
      prompt.insert(prompt.end(), hay.begin() + cut, hay.begin() + hay_len);
      prompt.insert(prompt.end(), question_ids.begin(), question_ids.end());
      for (size_t m = 0; m < modes.size(); ++m) {
        Generator gen(model, *caches[m], &tok, stop_ids, ctx, o.chunk);
        SamplingParams greedy;
        greedy.temperature = 0;
        greedy.max_tokens = o.answer_tokens;
        const GenerationOutput out = gen.generate(prompt, greedy);
        NiahCell cell;
        cell.ctx = ctx;
        cell.depth = depth;
        cell.answer = out.text;
        cell.found = out.text.find(needle.number) != std::string::npos;
        results[m].cells.push_back(cell);
      }
      if (progress) progress(fmt::format("ctx {} depth {:.2f} done", ctx, depth));
    }
  }
  for (NiahModeResult& r : results) {
    int found = 0;
    for (const NiahCell& c : r.cells) found += c.found;
    r.accuracy = r.cells.empty() ? 0 : double(found) / r.cells.size();
  }
  return results;
}

}  // namespace tq
