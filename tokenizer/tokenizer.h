// Tokenizers of the supported model families, behind one interface.
//   - byte-level BPE (GPT-2 byte map + merge ranks) with a pre-tokenizer regex chosen by name
//     (gpt-2, qwen2, llama-bpe, deepseek-llm, deepseek-coder, smollm) and optional NFC;
//   - SentencePiece-style BPE with scores (GGUF tokenizer.ggml.model == "llama").
// Sources: GGUF `tokenizer.ggml.*` metadata, HF `tokenizer.json` (+ tokenizer_config.json),
// or a `vocab.json` + `merges.txt` pair.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokens/token_id.h"

namespace tq {

class GgufFile;

struct SpecialTokens {
  std::optional<TokenId> bos;
  std::optional<TokenId> eos;
  std::optional<TokenId> pad;
  std::optional<TokenId> unk;
  bool add_bos = false;  // prepend BOS when encoding a whole prompt
  std::vector<TokenId> eot_ids;  // extra end-of-turn ids that also stop generation
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Raw tokenization: no BOS is added. With parse_special, registered special/added tokens in
  // the text become their ids (split out before BPE, longest match first); otherwise they are
  // ordinary text. Added tokens that are not special (HF special = false, GGUF user-defined) are
  // split out either way, as HF tokenizers and llama.cpp do.
  virtual std::vector<TokenId> encode(std::string_view text, bool parse_special) const = 0;

  // The bytes of one token as they appear in decoded text (byte-level: GPT-2 byte map undone;
  // SentencePiece: U+2581 -> space, <0xNN> -> byte). Special tokens decode to their text.
  virtual std::string token_bytes(TokenId id) const = 0;

  // The token's vocabulary string as stored (for display and chat template specials).
  virtual const std::string& token_text(TokenId id) const = 0;

  virtual int vocab_size() const = 0;
  virtual std::optional<TokenId> find_token(std::string_view text) const = 0;  // exact vocab lookup
  virtual bool is_special(TokenId id) const = 0;  // control / unknown / added special tokens

  const SpecialTokens& special() const { return special_; }

  // encode() plus a leading BOS when special().add_bos.
  std::vector<TokenId> encode_prompt(std::string_view text, bool parse_special) const;

  // Concatenated bytes of the tokens. SentencePiece: a leading space of the very first piece
  // is dropped when the tokenizer adds a prefix space (as llama.cpp / HF do).
  std::string decode(const std::vector<TokenId>& ids, bool skip_special = false) const;

  // True when decoding drops the leading space of the first piece (SentencePiece prefix space).
  bool strips_leading_space() const { return sp_strip_leading_space_; }

  // Factories; throw tq::Error naming the file and the problem.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& gguf);
  // `dir` holds tokenizer.json (and maybe tokenizer_config.json), or vocab.json + merges.txt
  // (+ tokenizer_config.json / added_tokens.json).
  static std::unique_ptr<Tokenizer> from_hf_dir(const std::string& dir);

 protected:
  SpecialTokens special_;
  bool sp_strip_leading_space_ = false;
};

// Streaming detokenizer: feeds ids one at a time and returns only complete UTF-8 text, holding
// back the bytes of a character split across tokens until it is complete.
class StreamDecoder {
 public:
  // continues_text: the ids follow text already there (a completion after a text prompt), so
  // SentencePiece's leading space of the first piece is kept, as llama.cpp and vLLM do.
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special = true, bool continues_text = false)
      : tok_(tok), skip_special_(skip_special), first_(!continues_text) {}
  std::string push(TokenId id);  // text that became complete with this token (may be "")
  std::string flush();           // whatever is held back (invalid bytes replaced by U+FFFD)

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool first_;
  std::string pending_;
};

}  // namespace tq
