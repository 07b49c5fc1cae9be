// The range check of a token id against a vocabulary and its message, shared by every layer that
// takes ids from outside: the forward pass, the engine, the sampler and the HTTP API.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace tq {

inline bool token_id_in_vocab(int64_t id, int64_t vocab_size) { return id >= 0 && id < vocab_size; }

// "prompt token id 70000 is outside the vocabulary (0..49151)". `id` as written (a JSON number
// may not fit an integer).
inline std::string token_id_outside_vocab(std::string_view what, std::string_view id, int64_t vocab_size) {
  return fmt::format("{} {} is outside the vocabulary (0..{})", what, id, vocab_size - 1);
}
inline std::string token_id_outside_vocab(std::string_view what, int64_t id, int64_t vocab_size) {
  return token_id_outside_vocab(what, std::to_string(id), vocab_size);
}

}  // namespace tq
