#include "engine/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "errors/error.h"

namespace tq {

namespace {

// Byte length of the UTF-8 sequence a lead byte starts; 0 for a continuation or invalid byte.
size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 0;
}

// If text[0, end) ends inside a multi-byte UTF-8 sequence, the sequence's start; else end.
// Malformed bytes are not held (they would never complete), they pass through unchanged.
size_t complete_utf8_prefix(std::string_view text, size_t end) {
  for (size_t back = 1; back <= 4 && back <= end; ++back) {
    const auto byte = static_cast<unsigned char>(text[end - back]);
    if ((byte & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t length = utf8_sequence_length(byte);
    return (length > back) ? end - back : end;
  }
  return end;
}

}  // namespace

StopMatcher::StopMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  for (size_t i = 0; i < stop_strings_.size(); ++i) {
    if (stop_strings_[i].empty()) fail("stop string {} is empty", i);
    longest_stop_ = std::max(longest_stop_, stop_strings_[i].size());
  }
}

size_t StopMatcher::hold_start() const {
  const std::string_view text = pending_;
  // A tail that is a proper prefix of a stop string is shorter than the longest stop string.
  const size_t earliest = text.size() >= longest_stop_ ? text.size() - longest_stop_ + 1 : 0;
  size_t start = text.size();
  for (size_t position = earliest; position < text.size(); ++position) {
    const std::string_view tail = text.substr(position);
    const bool could_be_stop =
        std::any_of(stop_strings_.begin(), stop_strings_.end(), [&](const std::string& stop) {
          return stop.size() > tail.size() && stop.starts_with(tail);
        });
    if (could_be_stop) {
      start = position;
      break;
    }
  }
  return complete_utf8_prefix(text, start);
}

StopMatchResult StopMatcher::push(std::string_view new_text) {
  if (stopped_) return {"", true, matched_};
  pending_.append(new_text);

  // pending_ holds less than one stop string of old text plus new_text, so searching all of it
  // is cheap. Any match is new: an earlier complete match would have stopped us already.
  size_t match_position = std::string::npos;
  const std::string* match = nullptr;
  for (const std::string& stop : stop_strings_) {
    const size_t position = pending_.find(stop);
    if (position < match_position) {
      match_position = position;
      match = &stop;
    }
  }
  if (match) {
    stopped_ = true;
    matched_ = *match;
    StopMatchResult result{pending_.substr(0, match_position), true, matched_};
    pending_.clear();
    return result;
  }

  const size_t hold = hold_start();
  StopMatchResult result{pending_.substr(0, hold), false, {}};
  pending_.erase(0, hold);
  return result;
}

std::string StopMatcher::flush() {
  if (stopped_) return {};
  return std::exchange(pending_, {});
}

bool is_stop_token(int32_t token_id, const SamplingParams& params,
                   std::span<const int32_t> eos_token_ids) {
  const auto contains = [token_id](auto ids) {
    return std::find(ids.begin(), ids.end(), token_id) != ids.end();
  };
  if (contains(std::span<const int32_t>(params.stop_token_ids))) return true;
  return !params.ignore_eos && contains(eos_token_ids);
}

}  // namespace tq
