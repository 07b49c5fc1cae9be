// Pre-tokenization: splits text into the words that BPE merges within. A pre-tokenizer is a
// sequence of PCRE2 regexes (UTF + UCP); each one splits every current piece into its matches
// and the gaps between them, all kept in order. This is HF tokenizers' Split(behavior =
// "Isolated") and llama.cpp's unicode_regex_split, so one regex reproduces the GPT-2 style
// pre-tokenizers and several in sequence reproduce DeepSeek's and Digits + ByteLevel (SmolLM2).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tq {

// The pattern of HF ByteLevel(use_regex = true), i.e. GPT-2's.
extern const char* const kGpt2SplitPattern;

// What a `tokenizer.ggml.pre` name implies, per llama.cpp's llama-vocab.cpp.
struct PreTokenizerPreset {
  std::string name;                   // canonical name (e.g. "qwen2" for "deepseek-r1-qwen")
  std::vector<std::string> patterns;  // applied in order
  bool nfc = false;                   // Qwen2's tokenizer.json normalizer is NFC
  bool ignore_merges = false;         // Llama 3: a word that is a whole token is taken as is
  bool add_bos = false;               // default for tokenizer.ggml.add_bos_token
};

// Known names give their preset; unknown ones give nullopt (callers fall back to "gpt-2").
std::optional<PreTokenizerPreset> pre_tokenizer_preset(std::string_view name);

class PreTokenizer {
 public:
  // Throws tq::Error naming the pattern when one does not compile.
  explicit PreTokenizer(std::vector<std::string> patterns);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Pieces of `text` (views into it), in order, covering it exactly. Invalid UTF-8 never
  // matches a pattern item, so such bytes end up in gap pieces and are still encoded.
  std::vector<std::string_view> split(std::string_view text) const;

  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  struct Compiled;
  std::vector<std::string> patterns_;
  std::vector<std::unique_ptr<Compiled>> compiled_;
};

}  // namespace tq
