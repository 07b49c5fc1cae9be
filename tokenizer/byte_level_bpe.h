// Byte-level BPE (GPT-2, Qwen2/Qwen3, Llama 3, SmolLM2, DeepSeek): text is optionally NFC
// normalized, split into words by a PreTokenizer, each word's bytes are mapped to GPT-2's
// printable "byte characters", and adjacent symbols are merged by merge rank (lowest first).
#pragma once
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocabulary.h"

namespace tq {

struct ByteLevelBpeOptions {
  bool nfc = false;               // NFC-normalize each segment first (Qwen2 family)
  bool ignore_merges = false;     // a word that is itself a token is emitted whole (Llama 3)
  bool add_prefix_space = false;  // HF ByteLevel(add_prefix_space): " " before a segment
};

class ByteLevelBpeTokenizer : public VocabularyTokenizer {
 public:
  ByteLevelBpeTokenizer(PreTokenizer pre_tokenizer, ByteLevelBpeOptions options);

  // Merges in rank order (first call = rank 0), given as the two token texts. Call after the
  // vocabulary is filled. A merge whose parts or result are not tokens can never apply and
  // is skipped; the count of those is returned by skipped_merges().
  void add_merge(std::string_view left, std::string_view right);
  size_t merge_count() const { return merges_.size(); }
  size_t skipped_merges() const { return skipped_merges_; }

  // The GPT-2 byte <-> printable character map (e.g. ' ' <-> U+0120 'Ġ').
  static const std::array<char32_t, 256>& byte_to_char();

 protected:
  void encode_segment(std::string_view text, bool at_input_start, std::vector<TokenId>& out) const override;
  std::string compute_token_bytes(TokenId id) const override;
  void prepare_encoding() override;

 private:
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  static uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void encode_word(std::string_view word, std::vector<TokenId>& out) const;
  void merge_word(std::string_view word, std::vector<TokenId>& out) const;

  PreTokenizer pre_tokenizer_;
  ByteLevelBpeOptions options_;
  std::unordered_map<uint64_t, Merge> merges_;
  size_t skipped_merges_ = 0;
  int32_t next_rank_ = 0;

  // Token id of each byte's single-character token (-1 if the vocabulary lacks it).
  std::array<TokenId, 256> byte_tokens_{};

  // Encoded words: natural text repeats words constantly, and merging is the costly part.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<TokenId>> word_cache_;
};

}  // namespace tq
