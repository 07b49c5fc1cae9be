#include "tokenizer/vocabulary.h"

#include <algorithm>

#include "errors/error.h"

namespace tq {
namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Texts that mark the end of a turn in the chat formats we know (the list llama.cpp uses to
// find its end-of-generation tokens).
constexpr std::string_view kEndOfTurnTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<|end_of_text|>", "<EOT>", "<|EOT|>", "<end_of_utterance>",
};

// The tables are sized by the largest id, so one absurd id would allocate gigabytes; loaders
// check ids against their files first, this is the last line of defence.
constexpr TokenId kMaxTokenId = (TokenId{1} << 24) - 1;

}  // namespace

void Vocabulary::set(TokenId id, std::string text, TokenType type, float score) {
  if (id < 0 || id > kMaxTokenId) fail("token id {} for token '{}' is out of range [0, {}]", id, text, kMaxTokenId);
  const auto index = static_cast<size_t>(id);
  if (index >= texts_.size()) {
    texts_.resize(index + 1);
    types_.resize(index + 1, TokenType::kUnused);
    scores_.resize(index + 1, 0.0f);
    strip_flags_.resize(index + 1, 0);
  }
  ids_.emplace(text, id);
  texts_[index] = std::move(text);
  types_[index] = type;
  scores_[index] = score;
}

void Vocabulary::set_strip(TokenId id, bool lstrip, bool rstrip) {
  strip_flags_.at(static_cast<size_t>(id)) = static_cast<uint8_t>((lstrip ? 1 : 0) | (rstrip ? 2 : 0));
}

std::optional<TokenId> Vocabulary::find(std::string_view text) const {
  auto it = ids_.find(text);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

bool Vocabulary::matchable(TokenId id, bool parse_special) const {
  const TokenType type = types_[static_cast<size_t>(id)];
  if (type == TokenType::kUserDefined) return true;
  return parse_special && (type == TokenType::kControl || type == TokenType::kUnknown);
}

void Vocabulary::build_special_matcher() {
  trie_.assign(1, TrieNode{});
  std::fill(std::begin(first_byte_of_special_), std::end(first_byte_of_special_), false);
  for (TokenId id = 0; id < size(); ++id) {
    const TokenType type = types_[static_cast<size_t>(id)];
    const bool special = type == TokenType::kControl || type == TokenType::kUnknown || type == TokenType::kUserDefined;
    const std::string& text = texts_[static_cast<size_t>(id)];
    if (!special || text.empty()) continue;
    int32_t node = 0;
    for (char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      auto it = trie_[static_cast<size_t>(node)].children.find(byte);
      if (it == trie_[static_cast<size_t>(node)].children.end()) {
        trie_.push_back(TrieNode{});
        const auto child = static_cast<int32_t>(trie_.size() - 1);
        trie_[static_cast<size_t>(node)].children.emplace(byte, child);
        node = child;
      } else {
        node = it->second;
      }
    }
    // Two ids with one text: the lower id wins, like the text -> id lookup.
    if (trie_[static_cast<size_t>(node)].token < 0) trie_[static_cast<size_t>(node)].token = id;
    first_byte_of_special_[static_cast<unsigned char>(text[0])] = true;
  }
}

std::pair<TokenId, size_t> Vocabulary::longest_special_at(std::string_view text, size_t pos,
                                                          bool parse_special) const {
  TokenId best = -1;
  size_t best_len = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& children = trie_[static_cast<size_t>(node)].children;
    auto it = children.find(static_cast<unsigned char>(text[i]));
    if (it == children.end()) break;
    node = it->second;
    const TokenId token = trie_[static_cast<size_t>(node)].token;
    if (token >= 0 && matchable(token, parse_special)) {
      best = token;
      best_len = i + 1 - pos;
    }
  }
  return {best, best_len};
}

std::vector<Vocabulary::Fragment> Vocabulary::split_special(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (trie_.empty() || trie_[0].children.empty()) {
    if (!text.empty()) fragments.push_back({text, std::nullopt});
    return fragments;
  }
  // Leftmost-longest scan (HF's added-vocabulary matching): at each position the longest
  // eligible special token wins; text between matches stays raw.
  size_t raw_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_of_special_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [token, length] = longest_special_at(text, pos, parse_special);
    if (token < 0) {
      ++pos;
      continue;
    }
    size_t raw_end = pos;
    if (strip_flags_[static_cast<size_t>(token)] & 1) {
      while (raw_end > raw_start && is_ascii_space(text[raw_end - 1])) --raw_end;
    }
    if (raw_end > raw_start) fragments.push_back({text.substr(raw_start, raw_end - raw_start), std::nullopt});
    fragments.push_back({std::string_view(), token});
    pos += length;
    if (strip_flags_[static_cast<size_t>(token)] & 2) {
      while (pos < text.size() && is_ascii_space(text[pos])) ++pos;
    }
    raw_start = pos;
  }
  if (raw_start < text.size()) fragments.push_back({text.substr(raw_start), std::nullopt});
  return fragments;
}

std::vector<TokenId> VocabularyTokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<TokenId> out;
  bool at_input_start = true;
  for (const Vocabulary::Fragment& fragment : vocab_.split_special(text, parse_special)) {
    if (fragment.token) {
      out.push_back(*fragment.token);
    } else {
      encode_segment(fragment.text, at_input_start, out);
    }
    at_input_start = false;
  }
  return out;
}

void VocabularyTokenizer::check_id(TokenId id) const {
  if (!vocab_.contains(id)) fail("token id {} is out of range (vocabulary size {})", id, vocab_.size());
}

std::string VocabularyTokenizer::token_bytes(TokenId id) const {
  check_id(id);
  return token_bytes_cache_[static_cast<size_t>(id)];
}

const std::string& VocabularyTokenizer::token_text(TokenId id) const {
  check_id(id);
  return vocab_.text(id);
}

bool VocabularyTokenizer::is_special(TokenId id) const {
  if (!vocab_.contains(id)) return false;
  const TokenType type = vocab_.type(id);
  return type == TokenType::kControl || type == TokenType::kUnknown;
}

void VocabularyTokenizer::finalize() {
  prepare_encoding();
  vocab_.build_special_matcher();
  token_bytes_cache_.resize(static_cast<size_t>(vocab_.size()));
  for (TokenId id = 0; id < vocab_.size(); ++id) token_bytes_cache_[static_cast<size_t>(id)] = compute_token_bytes(id);

  for (std::string_view text : kEndOfTurnTexts) {
    const std::optional<TokenId> id = vocab_.find(text);
    if (!id || id == special_.eos) continue;
    if (std::find(special_.eot_ids.begin(), special_.eot_ids.end(), *id) == special_.eot_ids.end()) {
      special_.eot_ids.push_back(*id);
    }
  }
}

}  // namespace tq
