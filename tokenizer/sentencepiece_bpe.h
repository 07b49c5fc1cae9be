// SentencePiece-style BPE with scores (GGUF tokenizer.ggml.model == "llama": Llama 1/2,
// TinyLlama, stories260K). Follows llama.cpp's llm_tokenizer_spm: spaces become U+2581 '▁', a
// '▁' is prefixed to the text between special tokens (see SpacePrefix), the characters are
// merged pairwise choosing the highest-scoring resulting token, and characters that are not
// tokens fall back to <0xNN> byte tokens.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/vocabulary.h"

namespace tq {

// Where a '▁' is prefixed to the text segments between special tokens.
enum class SpacePrefix {
  kNone,
  // SentencePiece's add_dummy_prefix (llama.cpp; HF normalizer Prepend("▁")): every segment.
  kEverySegment,
  // HF Metaspace(prepend_scheme = "always" / "first"): unless the segment already starts with a
  // space; "first" only for a segment at the very start of the input.
  kMetaspaceAlways,
  kMetaspaceFirst,
};

class SentencePieceBpeTokenizer : public VocabularyTokenizer {
 public:
  explicit SentencePieceBpeTokenizer(SpacePrefix prefix);

 protected:
  void encode_segment(std::string_view text, bool at_input_start, std::vector<TokenId>& out) const override;
  std::string compute_token_bytes(TokenId id) const override;
  void prepare_encoding() override;

 private:
  bool can_merge_into(TokenId id) const;
  void append_byte_fallback(std::string_view piece, std::vector<TokenId>& out) const;

  SpacePrefix prefix_;
  std::array<TokenId, 256> byte_tokens_{};  // <0xNN> (or the single-byte token), -1 if neither
};

}  // namespace tq
