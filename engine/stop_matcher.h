// Stop conditions for a streamed completion: stop strings found across detokenized chunks, and
// the stop-token check. OpenAI / vLLM semantics: the matched stop string and everything after it
// are not part of the output.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"

namespace tq {

struct StopMatchResult {
  std::string text;         // safe to emit now (may be empty)
  bool stopped = false;     // a stop string matched: end the request after emitting text
  std::string stop_string;  // which one matched (empty unless stopped)
};

// Feed it the detokenized text as it grows. It holds back the shortest tail that could still
// become a stop string (and an incomplete trailing UTF-8 sequence, so a chunk never ends inside a
// character), and emits everything before it. Matching is on bytes; stop strings are assumed to be
// valid UTF-8, so a held-back stop prefix always starts on a character boundary.
// When several stop strings match, the one starting earliest wins (ties: the first listed).
class StopMatcher {
 public:
  // Throws tq::Error if a stop string is empty.
  explicit StopMatcher(std::vector<std::string> stop_strings);

  // Appends new_text and returns what may be emitted. After a match every later push returns
  // {"", true, stop_string}.
  StopMatchResult push(std::string_view new_text);

  // End of generation (no match): returns and clears the held-back text. Empty after a match.
  std::string flush();

  bool stopped() const { return stopped_; }
  const std::string& held_back() const { return pending_; }

 private:
  // Start of the held-back tail of pending_: the earliest position whose suffix is a proper
  // prefix of a stop string, moved back further over an incomplete UTF-8 sequence.
  size_t hold_start() const;

  std::vector<std::string> stop_strings_;
  size_t longest_stop_ = 0;  // bytes
  std::string pending_;      // text received but not yet emitted
  bool stopped_ = false;
  std::string matched_;
};

// True if generation must end at this token: one of params.stop_token_ids, or one of the model's
// EOS ids unless params.ignore_eos. The caller excludes stop tokens from the emitted text.
bool is_stop_token(int32_t token_id, const SamplingParams& params,
                   std::span<const int32_t> eos_token_ids);

}  // namespace tq
