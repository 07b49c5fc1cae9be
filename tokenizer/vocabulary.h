// The token table shared by the BPE and SentencePiece tokenizers (texts, GGUF token types,
// scores, text -> id), the splitting of text on special/added tokens that happens before any
// BPE, and VocabularyTokenizer, the common base that implements the Tokenizer interface on top.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tq {

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

class Vocabulary {
 public:
  // Sets token `id` (growing the table as needed). A text already used by another id keeps its
  // first id for lookups, as in HF where an added token re-declaring a vocab entry is that entry.
  void set(TokenId id, std::string text, TokenType type, float score = 0.0f);
  void set_type(TokenId id, TokenType type) { types_.at(static_cast<size_t>(id)) = type; }
  // HF AddedToken lstrip/rstrip: the token swallows ASCII whitespace on that side.
  void set_strip(TokenId id, bool lstrip, bool rstrip);

  int size() const { return static_cast<int>(texts_.size()); }
  bool contains(TokenId id) const { return id >= 0 && id < size(); }
  const std::string& text(TokenId id) const { return texts_[static_cast<size_t>(id)]; }
  TokenType type(TokenId id) const { return types_[static_cast<size_t>(id)]; }
  float score(TokenId id) const { return scores_[static_cast<size_t>(id)]; }
  std::optional<TokenId> find(std::string_view text) const;

  // A piece of input text after special-token splitting: either raw text or one token.
  struct Fragment {
    std::string_view text;  // raw text (empty when this is a token)
    std::optional<TokenId> token;
  };

  // Builds the matcher used by split_special(); call after the last set()/set_type().
  // Control and unknown tokens are matched only with parse_special; user-defined (added,
  // non-special) tokens are always split out, as HF tokenizers and llama.cpp both do.
  void build_special_matcher();
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;

 private:
  struct TrieNode {
    std::map<unsigned char, int32_t> children;
    TokenId token = -1;
  };
  bool matchable(TokenId id, bool parse_special) const;
  // Longest special token starting at `pos` that parse_special allows; -1 when none.
  std::pair<TokenId, size_t> longest_special_at(std::string_view text, size_t pos, bool parse_special) const;

  std::vector<std::string> texts_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  std::vector<uint8_t> strip_flags_;  // bit 0: lstrip, bit 1: rstrip
  // Transparent hashing so lookups by string_view (hot in SentencePiece merging) never allocate.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  std::unordered_map<std::string, TokenId, TextHash, std::equal_to<>> ids_;
  std::vector<TrieNode> trie_;
  bool first_byte_of_special_[256] = {};
};

// Implements the Tokenizer interface over a Vocabulary; subclasses provide how raw text (between
// special tokens) is encoded and how one token's bytes are obtained.
class VocabularyTokenizer : public Tokenizer {
 public:
  std::vector<TokenId> encode(std::string_view text, bool parse_special) const override;
  std::string token_bytes(TokenId id) const override;
  const std::string& token_text(TokenId id) const override;
  int vocab_size() const override { return vocab_.size(); }
  std::optional<TokenId> find_token(std::string_view text) const override { return vocab_.find(text); }
  bool is_special(TokenId id) const override;

  const Vocabulary& vocabulary() const { return vocab_; }
  Vocabulary& mutable_vocabulary() { return vocab_; }
  SpecialTokens& mutable_special() { return special_; }

  // Call once the vocabulary and special ids are final: builds the special-token matcher and
  // the per-token byte cache, and collects end-of-turn ids.
  void finalize();

 protected:
  // Encodes raw text between special tokens. `at_input_start`: this segment begins the input
  // (rather than following a special token); Metaspace(prepend_scheme = "first") needs to know.
  virtual void encode_segment(std::string_view text, bool at_input_start, std::vector<TokenId>& out) const = 0;
  virtual std::string compute_token_bytes(TokenId id) const = 0;
  // Hook run by finalize() first, once the vocabulary is complete (lookup tables etc.).
  virtual void prepare_encoding() {}

  Vocabulary vocab_;

 private:
  void check_id(TokenId id) const;
  std::vector<std::string> token_bytes_cache_;
};

}  // namespace tq
