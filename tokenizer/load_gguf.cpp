// Tokenizer::from_gguf: the `tokenizer.ggml.*` metadata of a GGUF file, read the way
// llama.cpp's llama_vocab::impl::load does for the "gpt2" (byte-level BPE) and "llama"
// (SentencePiece) tokenizer models.
#include <fmt/format.h>

#include "errors/error.h"
#include "io/gguf.h"
#include "tokenizer/byte_level_bpe.h"
#include "tokenizer/sentencepiece_bpe.h"

namespace tq {
namespace {

// Tokens llama.cpp treats as end-of-generation by their text; it also forces them to be
// control tokens so that plain text never turns into them.
constexpr std::string_view kControlByText[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<|end_of_text|>",
};

std::optional<TokenId> special_id(const GgufFile& gguf, const char* key, int vocab_size) {
  if (!gguf.has(key)) return std::nullopt;
  const int64_t id = gguf.get_int(key);
  if (id < 0 || id >= vocab_size) {
    // Converters write UINT32_MAX for "none"; llama.cpp ignores any out-of-range id too.
    if (id != 0xFFFFFFFFLL && id != -1) {
      fmt::print(stderr, "warning: {}: {} = {} is outside the vocabulary (size {}), ignored\n", gguf.path(), key, id,
                 vocab_size);
    }
    return std::nullopt;
  }
  return static_cast<TokenId>(id);
}

PreTokenizerPreset preset_for(const GgufFile& gguf) {
  const std::optional<std::string> name = gguf.get_string_opt("tokenizer.ggml.pre");
  if (name) {
    if (std::optional<PreTokenizerPreset> preset = pre_tokenizer_preset(*name)) return *preset;
  }
  fmt::print(stderr, "warning: {}: pre-tokenizer '{}' is not known, using gpt-2's; tokenization may differ\n",
             gguf.path(), name.value_or("(missing tokenizer.ggml.pre)"));
  return *pre_tokenizer_preset("gpt-2");
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& gguf) {
  const std::string model = gguf.get_string("tokenizer.ggml.model");
  const std::vector<std::string> tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (tokens.empty()) fail("{}: tokenizer.ggml.tokens is empty", gguf.path());
  const auto n_tokens = static_cast<int>(tokens.size());

  std::vector<int64_t> types;
  if (gguf.has("tokenizer.ggml.token_type")) {
    types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (types.size() < tokens.size()) {
      fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", gguf.path(), types.size(), tokens.size());
    }
  }
  std::vector<double> scores;
  if (gguf.has("tokenizer.ggml.scores")) {
    scores = gguf.get_float_array("tokenizer.ggml.scores");
    if (scores.size() < tokens.size()) {
      fail("{}: tokenizer.ggml.scores has {} entries for {} tokens", gguf.path(), scores.size(), tokens.size());
    }
  }

  std::unique_ptr<VocabularyTokenizer> tok;
  ByteLevelBpeTokenizer* byte_level = nullptr;
  bool default_add_bos = false;
  if (model == "gpt2") {
    const PreTokenizerPreset preset = preset_for(gguf);
    ByteLevelBpeOptions options;
    options.nfc = preset.nfc;
    options.ignore_merges = preset.ignore_merges;
    default_add_bos = preset.add_bos;
    auto bpe = std::make_unique<ByteLevelBpeTokenizer>(PreTokenizer(preset.patterns), options);
    byte_level = bpe.get();
    tok = std::move(bpe);
  } else if (model == "llama") {
    const bool add_space_prefix = gguf.get_bool_or("tokenizer.ggml.add_space_prefix", true);
    tok = std::make_unique<SentencePieceBpeTokenizer>(add_space_prefix ? SpacePrefix::kEverySegment
                                                                       : SpacePrefix::kNone);
    default_add_bos = true;
  } else {
    fail("{}: tokenizer model '{}' (tokenizer.ggml.model) is not supported; supported: gpt2, llama", gguf.path(),
         model);
  }

  Vocabulary& vocab = tok->mutable_vocabulary();
  for (int i = 0; i < n_tokens; ++i) {
    TokenType type = TokenType::kNormal;
    if (!types.empty()) {
      const int64_t t = types[static_cast<size_t>(i)];
      type = t >= 0 && t <= 6 ? static_cast<TokenType>(t) : TokenType::kUndefined;
    }
    std::string text = tokens[static_cast<size_t>(i)];
    if (text.empty()) text = fmt::format("[EMPTY_{}]", i);  // as llama.cpp: keep ids distinct
    vocab.set(i, std::move(text), type, scores.empty() ? 0.0f : static_cast<float>(scores[static_cast<size_t>(i)]));
  }
  for (std::string_view text : kControlByText) {
    if (std::optional<TokenId> id = vocab.find(text)) vocab.set_type(*id, TokenType::kControl);
  }

  if (byte_level != nullptr) {
    if (!gguf.has("tokenizer.ggml.merges")) fail("{}: tokenizer.ggml.merges is missing (needed by gpt2)", gguf.path());
    for (const std::string& merge : gguf.get_string_array("tokenizer.ggml.merges")) {
      const size_t space = merge.find(' ', 1);
      if (space == std::string::npos) {
        fail("{}: tokenizer.ggml.merges entry '{}' is not two tokens separated by a space", gguf.path(), merge);
      }
      byte_level->add_merge(std::string_view(merge).substr(0, space), std::string_view(merge).substr(space + 1));
    }
  }

  SpecialTokens& special = tok->mutable_special();
  if (model == "llama") {  // llama.cpp's defaults for SentencePiece vocabularies
    special.unk = 0;
    special.bos = 1;
    special.eos = 2;
  }
  if (auto id = special_id(gguf, "tokenizer.ggml.bos_token_id", n_tokens)) special.bos = id;
  if (auto id = special_id(gguf, "tokenizer.ggml.eos_token_id", n_tokens)) special.eos = id;
  if (auto id = special_id(gguf, "tokenizer.ggml.unknown_token_id", n_tokens)) special.unk = id;
  if (auto id = special_id(gguf, "tokenizer.ggml.padding_token_id", n_tokens)) special.pad = id;
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    if (auto id = special_id(gguf, key, n_tokens); id && id != special.eos) special.eot_ids.push_back(*id);
  }
  special.add_bos = gguf.get_bool_or("tokenizer.ggml.add_bos_token", default_add_bos) && special.bos.has_value();

  tok->finalize();
  return tok;
}

}  // namespace tq
