// Tokenizer::from_hf_dir: Hugging Face tokenizer files.
//   - tokenizer.json (the `tokenizers` library's format): BPE model, normalizer, pre-tokenizer
//     and added tokens; only the pieces our model families use are accepted, anything else is a
//     tq::Error that names the file and the unsupported component.
//   - vocab.json + merges.txt (a "slow" GPT-2 / Qwen2 tokenizer), with added_tokens.json.
// tokenizer_config.json supplies bos/eos/pad/unk, add_bos_token and added_tokens_decoder.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "errors/error.h"
#include "tokenizer/byte_level_bpe.h"
#include "tokenizer/sentencepiece_bpe.h"

namespace tq {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) fail("{}: read error", path);
  return buffer.str();
}

json read_json(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

std::optional<json> read_json_if_exists(const std::string& path) {
  if (!fs::exists(path)) return std::nullopt;
  return read_json(path);
}

// Token ids in the files index arrays sized by the largest id, so an absurd id (2000000000)
// must be rejected before anything is allocated for it. Real vocabularies are dense: the ids
// are 0 .. (number of entries in the files) - 1, give or take a few holes.
constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
constexpr int64_t kTokenIdSlack = 1024;  // holes tolerated beyond the number of entries

int64_t max_token_id(size_t entries) {
  return std::min<int64_t>(kMaxTokenId, static_cast<int64_t>(entries) + kTokenIdSlack);
}

[[noreturn]] void fail_token_id(const std::string& path, std::string_view token, std::string_view id,
                                int64_t max_id, size_t entries) {
  fail("{}: token id {} of '{}' is out of range: ids must be in [0, {}] ({} token entries in the files)", path, id,
       token, max_id, entries);
}

// A token id given as a JSON number (vocab, added_tokens, added_tokens.json): an integer in
// [0, max_token_id(entries)].
TokenId read_token_id(const json& value, const std::string& path, std::string_view token, size_t entries) {
  const int64_t max_id = max_token_id(entries);
  if (value.is_number_unsigned()) {
    const uint64_t id = value.get<uint64_t>();
    if (id > static_cast<uint64_t>(max_id)) fail_token_id(path, token, value.dump(), max_id, entries);
    return static_cast<TokenId>(id);
  }
  if (value.is_number_integer()) {
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id > max_id) fail_token_id(path, token, value.dump(), max_id, entries);
    return static_cast<TokenId>(id);
  }
  fail("{}: token id of '{}' must be an integer, got {}", path, token, value.dump());
}

// A token id given as a JSON object key (tokenizer_config.json added_tokens_decoder).
TokenId parse_token_id(std::string_view text, const std::string& path, size_t entries) {
  const int64_t max_id = max_token_id(entries);
  int64_t id = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (text.empty() || error == std::errc::invalid_argument || end != text.data() + text.size()) {
    fail("{}: added_tokens_decoder key '{}' is not a token id", path, text);
  }
  if (error == std::errc::result_out_of_range || id < 0 || id > max_id) {
    fail("{}: added_tokens_decoder token id {} is out of range: ids must be in [0, {}] ({} token entries in the files)",
         path, text, max_id, entries);
  }
  return static_cast<TokenId>(id);
}

// A special token in HF configs is a string, an AddedToken object {"content": ...}, or null.
std::optional<std::string> token_content(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return std::nullopt;
}

// Escapes a literal for PCRE2 (HF Split with a String pattern).
std::string regex_quote(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x80 && !std::isalnum(byte)) out += '\\';
    out += c;
  }
  return out;
}

// What the normalizer and pre-tokenizer of a tokenizer.json amount to.
struct TextPipeline {
  bool nfc = false;
  bool spm_spaces = false;      // Replace(" " -> "▁") / Metaspace: SentencePiece-style text
  SpacePrefix spm_prefix = SpacePrefix::kNone;  // Prepend("▁") or Metaspace's prepend_scheme
  bool byte_level = false;      // ByteLevel pre-tokenizer or decoder present
  bool add_prefix_space = false;
  std::vector<std::string> patterns;
};

void parse_normalizer(const json& node, const std::string& path, TextPipeline& pipeline) {
  if (node.is_null()) return;
  const std::string type = node.value("type", "");
  if (type == "Sequence") {
    for (const json& child : node.at("normalizers")) parse_normalizer(child, path, pipeline);
  } else if (type == "NFC") {
    pipeline.nfc = true;
  } else if (type == "Prepend" && node.value("prepend", "") == "\xE2\x96\x81") {
    pipeline.spm_prefix = SpacePrefix::kEverySegment;
  } else if (type == "Replace" && token_content(node.at("pattern").value("String", json())) == " " &&
             node.value("content", "") == "\xE2\x96\x81") {
    pipeline.spm_spaces = true;
  } else {
    fail("{}: normalizer '{}' is not supported (supported: NFC, Sequence, SentencePiece-style Prepend/Replace)",
         path, type.empty() ? node.dump() : type);
  }
}

void parse_pre_tokenizer(const json& node, const std::string& path, TextPipeline& pipeline) {
  if (node.is_null()) return;
  const std::string type = node.value("type", "");
  if (type == "Sequence") {
    for (const json& child : node.at("pretokenizers")) parse_pre_tokenizer(child, path, pipeline);
  } else if (type == "ByteLevel") {
    pipeline.byte_level = true;
    pipeline.add_prefix_space = node.value("add_prefix_space", false);
    if (node.value("use_regex", true)) pipeline.patterns.push_back(kGpt2SplitPattern);
  } else if (type == "Split") {
    const std::string behavior = node.value("behavior", "");
    if (behavior != "Isolated" || node.value("invert", false)) {
      fail("{}: Split pre-tokenizer with behavior '{}'{} is not supported (only Isolated)", path, behavior,
           node.value("invert", false) ? " and invert" : "");
    }
    const json& pattern = node.at("pattern");
    if (pattern.contains("Regex")) {
      pipeline.patterns.push_back(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String")) {
      pipeline.patterns.push_back(regex_quote(pattern["String"].get<std::string>()));
    } else {
      fail("{}: Split pre-tokenizer pattern {} is neither Regex nor String", path, pattern.dump());
    }
  } else if (type == "Digits") {
    pipeline.patterns.push_back(node.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+");
  } else if (type == "Metaspace") {
    // split (on '▁', i.e. per word) is the default of HF Metaspace and of files from before the key.
    if (node.value("split", true)) fail("{}: Metaspace pre-tokenizer with split = true is not supported", path);
    if (node.value("replacement", "\xE2\x96\x81") != "\xE2\x96\x81") {
      fail("{}: Metaspace pre-tokenizer with a replacement other than U+2581 is not supported", path);
    }
    pipeline.spm_spaces = true;
    // Older files have add_prefix_space instead of prepend_scheme.
    const std::string scheme = node.value("prepend_scheme", node.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") {
      pipeline.spm_prefix = SpacePrefix::kMetaspaceAlways;
    } else if (scheme == "first") {
      pipeline.spm_prefix = SpacePrefix::kMetaspaceFirst;
    } else if (scheme != "never") {
      fail("{}: Metaspace prepend_scheme '{}' is not supported", path, scheme);
    }
  } else {
    fail("{}: pre_tokenizer '{}' is not supported (supported: ByteLevel, Split, Digits, Sequence, Metaspace)", path,
         type.empty() ? node.dump() : type);
  }
}

struct SpecialTokenConfig {
  std::optional<std::string> bos, eos, pad, unk;
  std::optional<bool> add_bos;
  std::vector<std::string> additional;
  std::string tokenizer_class;
};

SpecialTokenConfig read_special_config(const std::optional<json>& config, const std::string& config_path) {
  SpecialTokenConfig out;
  if (!config) return out;
  if (!config->is_object()) fail("{}: expected a JSON object, got {}", config_path, config->type_name());
  const json& c = *config;
  if (c.contains("bos_token")) out.bos = token_content(c["bos_token"]);
  if (c.contains("eos_token")) out.eos = token_content(c["eos_token"]);
  if (c.contains("pad_token")) out.pad = token_content(c["pad_token"]);
  if (c.contains("unk_token")) out.unk = token_content(c["unk_token"]);
  if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean()) out.add_bos = c["add_bos_token"].get<bool>();
  if (c.contains("additional_special_tokens") && c["additional_special_tokens"].is_array()) {
    for (const json& t : c["additional_special_tokens"]) {
      if (auto content = token_content(t)) out.additional.push_back(*content);
    }
  }
  if (c.contains("tokenizer_class") && c["tokenizer_class"].is_string()) out.tokenizer_class = c["tokenizer_class"];
  return out;
}

// Added token entries: tokenizer.json "added_tokens" and tokenizer_config "added_tokens_decoder".
// `id` is already range-checked; a flag of the wrong type throws json::exception, which the
// callers turn into an error naming the file.
void add_added_token(Vocabulary& vocab, TokenId id, const json& entry, const std::string& path) {
  if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string()) {
    fail("{}: added token {} is not an object with a string \"content\": {}", path, id, entry.dump());
  }
  const std::string content = entry["content"].get<std::string>();
  vocab.set(id, content, entry.value("special", false) ? TokenType::kControl : TokenType::kUserDefined);
  vocab.set_strip(id, entry.value("lstrip", false), entry.value("rstrip", false));
}

void apply_special_config(VocabularyTokenizer& tok, const SpecialTokenConfig& config, const std::string& config_path) {
  SpecialTokens& special = tok.mutable_special();
  auto resolve = [&](const std::optional<std::string>& text, const char* what) -> std::optional<TokenId> {
    if (!text) return std::nullopt;
    std::optional<TokenId> id = tok.find_token(*text);
    if (!id) fail("{}: {} '{}' is not in the vocabulary", config_path, what, *text);
    return id;
  };
  if (config.bos) special.bos = resolve(config.bos, "bos_token");
  if (config.eos) special.eos = resolve(config.eos, "eos_token");
  if (config.pad) special.pad = resolve(config.pad, "pad_token");
  if (config.unk) special.unk = resolve(config.unk, "unk_token");
  if (config.add_bos) special.add_bos = *config.add_bos && special.bos.has_value();
}

// Llama 3 style: the post-processor's "single" template starts with a special token (BOS).
void apply_post_processor(VocabularyTokenizer& tok, const json& post) {
  if (!post.is_object()) return;
  const json* processor = &post;
  if (post.value("type", "") == "Sequence" && post.contains("processors")) {
    for (const json& p : post["processors"]) {
      if (p.value("type", "") == "TemplateProcessing") processor = &p;
    }
  }
  if (processor->value("type", "") != "TemplateProcessing" || !processor->contains("single")) return;
  const json& single = (*processor)["single"];
  if (!single.is_array() || single.empty() || !single[0].contains("SpecialToken")) return;
  const std::string text = single[0]["SpecialToken"].value("id", "");
  if (std::optional<TokenId> id = tok.find_token(text)) {
    tok.mutable_special().bos = id;
    tok.mutable_special().add_bos = true;
  }
}

// SentencePiece-style BPE from tokenizer.json keeps merges, not scores. The converters emit
// merges in order of the merged piece's score, so minus the rank of the first merge producing a
// piece orders pieces the way SentencePiece scores would. Pieces no merge produces get -infinity,
// which the SentencePiece tokenizer reads as "never a merge result".
void scores_from_merges(Vocabulary& vocab, const json& merges) {
  std::vector<float> score(static_cast<size_t>(vocab.size()), -std::numeric_limits<float>::infinity());
  int rank = 0;
  for (const json& merge : merges) {
    std::string joined;
    if (merge.is_string()) {
      const std::string m = merge.get<std::string>();
      const size_t space = m.find(' ', 1);
      joined = space == std::string::npos ? m : m.substr(0, space) + m.substr(space + 1);
    } else {
      joined = merge.at(0).get<std::string>() + merge.at(1).get<std::string>();
    }
    if (std::optional<TokenId> id = vocab.find(joined)) {
      float& s = score[static_cast<size_t>(*id)];
      s = std::max(s, -static_cast<float>(rank));
    }
    ++rank;
  }
  for (TokenId id = 0; id < vocab.size(); ++id) {
    vocab.set(id, vocab.text(id), vocab.type(id), score[static_cast<size_t>(id)]);
  }
}

void add_merges(ByteLevelBpeTokenizer& tok, const json& merges, const std::string& path) {
  for (const json& merge : merges) {
    if (merge.is_string()) {
      const std::string m = merge.get<std::string>();
      const size_t space = m.find(' ', 1);
      if (space == std::string::npos) fail("{}: merge '{}' is not two tokens separated by a space", path, m);
      tok.add_merge(std::string_view(m).substr(0, space), std::string_view(m).substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2) {
      tok.add_merge(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      fail("{}: merge {} is neither \"a b\" nor [\"a\", \"b\"]", path, merge.dump());
    }
  }
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& dir, const std::string& path) {
  const json root = read_json(path);
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  const std::optional<json> config = read_json_if_exists(config_path);
  const SpecialTokenConfig special_config = read_special_config(config, config_path);
  try {
    const json& model = root.at("model");
    const std::string model_type = model.value("type", "BPE");
    if (model_type != "BPE") fail("{}: tokenizer model '{}' is not supported (only BPE)", path, model_type);
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(key) && !model[key].is_null() && !model[key].get<std::string>().empty()) {
        fail("{}: BPE option {} is not supported", path, key);
      }
    }
    if (model.contains("dropout") && !model["dropout"].is_null()) fail("{}: BPE dropout is not supported", path);

    TextPipeline pipeline;
    parse_normalizer(root.value("normalizer", json()), path, pipeline);
    parse_pre_tokenizer(root.value("pre_tokenizer", json()), path, pipeline);
    const json decoder = root.value("decoder", json());
    if (decoder.is_object() && decoder.value("type", "") == "ByteLevel") pipeline.byte_level = true;
    if (pipeline.byte_level == (pipeline.spm_spaces || pipeline.spm_prefix != SpacePrefix::kNone)) {
      fail("{}: cannot tell whether this is a byte-level or a SentencePiece-style BPE tokenizer", path);
    }

    std::unique_ptr<VocabularyTokenizer> tok;
    ByteLevelBpeTokenizer* byte_level = nullptr;
    if (pipeline.byte_level) {
      ByteLevelBpeOptions options;
      options.nfc = pipeline.nfc;
      options.ignore_merges = model.value("ignore_merges", false);
      options.add_prefix_space = pipeline.add_prefix_space;
      std::optional<PreTokenizer> pre_tokenizer;
      try {
        pre_tokenizer.emplace(pipeline.patterns);
      } catch (const Error& e) {
        fail("{}: pre_tokenizer: {}", path, e.what());
      }
      auto bpe = std::make_unique<ByteLevelBpeTokenizer>(std::move(*pre_tokenizer), options);
      byte_level = bpe.get();
      tok = std::move(bpe);
    } else {
      if (!pipeline.patterns.empty() || pipeline.nfc) {
        fail("{}: SentencePiece-style tokenizer with extra normalizer/pre-tokenizer steps is not supported", path);
      }
      tok = std::make_unique<SentencePieceBpeTokenizer>(pipeline.spm_prefix);
    }

    Vocabulary& vocab = tok->mutable_vocabulary();
    if (!model.contains("vocab") || !model["vocab"].is_object()) fail("{}: model.vocab is not an object", path);
    if (model.contains("merges") && !model["merges"].is_array()) fail("{}: model.merges is not an array", path);
    const json added_tokens = root.value("added_tokens", json::array());
    if (!added_tokens.is_array() && !added_tokens.is_null()) fail("{}: added_tokens is not an array", path);
    const size_t entries = model["vocab"].size() + added_tokens.size();
    for (const auto& [text, id] : model["vocab"].items()) {
      vocab.set(read_token_id(id, path, text, entries), text, TokenType::kNormal);
    }
    if (!pipeline.byte_level) {
      for (TokenId id = 0; id < vocab.size(); ++id) {
        const std::string& text = vocab.text(id);
        if (text.size() == 6 && text.rfind("<0x", 0) == 0 && text.back() == '>') vocab.set_type(id, TokenType::kByte);
      }
    }
    if (added_tokens.is_array()) {
      for (const json& entry : added_tokens) {
        const std::string content = entry.is_object() && entry.contains("content") && entry["content"].is_string()
                                        ? entry["content"].get<std::string>()
                                        : std::string("?");
        add_added_token(vocab, read_token_id(entry.at("id"), path, content, entries), entry, path);
      }
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      if (std::optional<TokenId> unk = vocab.find(model["unk_token"].get<std::string>())) {
        vocab.set_type(*unk, TokenType::kUnknown);
        tok->mutable_special().unk = unk;
      }
    }
    const json merges = model.value("merges", json::array());
    if (byte_level != nullptr) {
      add_merges(*byte_level, merges, path);
    } else {
      scores_from_merges(vocab, merges);
    }

    apply_post_processor(*tok, root.value("post_processor", json()));
    apply_special_config(*tok, special_config, config_path);
    tok->finalize();
    return tok;
  } catch (const json::exception& e) {
    fail("{}: unexpected tokenizer.json structure: {}", path, e.what());
  }
}

std::unique_ptr<Tokenizer> load_vocab_and_merges(const std::string& dir) {
  const std::string vocab_path = (fs::path(dir) / "vocab.json").string();
  const std::string merges_path = (fs::path(dir) / "merges.txt").string();
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  const std::optional<json> config = read_json_if_exists(config_path);
  const SpecialTokenConfig special_config = read_special_config(config, config_path);

  // A slow tokenizer's class decides the pre-tokenizer: Qwen2Tokenizer hardcodes the Qwen2
  // regex and NFC; GPT2Tokenizer (and unknown classes, with a warning) the GPT-2 regex.
  std::string preset_name = "gpt-2";
  const std::string& cls = special_config.tokenizer_class;
  if (cls == "Qwen2Tokenizer" || cls == "Qwen2TokenizerFast") {
    preset_name = "qwen2";
  } else if (!cls.empty() && cls != "GPT2Tokenizer" && cls != "GPT2TokenizerFast") {
    fmt::print(stderr, "warning: {}: tokenizer_class '{}' unknown, assuming the GPT-2 pre-tokenizer\n", config_path,
               cls);
  }
  const PreTokenizerPreset preset = *pre_tokenizer_preset(preset_name);
  ByteLevelBpeOptions options;
  options.nfc = preset.nfc;
  auto tok = std::make_unique<ByteLevelBpeTokenizer>(PreTokenizer(preset.patterns), options);
  Vocabulary& vocab = tok->mutable_vocabulary();

  const json vocab_json = read_json(vocab_path);
  if (!vocab_json.is_object()) fail("{}: expected an object of token -> id", vocab_path);
  const std::string added_path = (fs::path(dir) / "added_tokens.json").string();
  const std::optional<json> added = read_json_if_exists(added_path);
  if (added && !added->is_object()) {
    fail("{}: expected an object of token -> id, got {}", added_path, added->type_name());
  }
  const json* decoder = nullptr;
  if (config && config->contains("added_tokens_decoder")) {
    decoder = &(*config)["added_tokens_decoder"];
    if (!decoder->is_object()) fail("{}: added_tokens_decoder is not an object of id -> token", config_path);
  }
  // Every id is checked against the entries of all three files before any is used.
  const size_t entries = vocab_json.size() + (added ? added->size() : 0) + (decoder ? decoder->size() : 0);

  for (const auto& [text, id] : vocab_json.items()) {
    vocab.set(read_token_id(id, vocab_path, text, entries), text, TokenType::kNormal);
  }

  std::vector<std::string> special_texts = special_config.additional;
  for (const auto& t : {special_config.bos, special_config.eos, special_config.pad, special_config.unk}) {
    if (t) special_texts.push_back(*t);
  }
  if (added) {
    for (const auto& [text, id] : added->items()) {
      const bool special = std::find(special_texts.begin(), special_texts.end(), text) != special_texts.end();
      vocab.set(read_token_id(id, added_path, text, entries), text,
                special ? TokenType::kControl : TokenType::kUserDefined);
    }
  }
  if (decoder) {
    try {
      for (const auto& [id, entry] : decoder->items()) {
        add_added_token(vocab, parse_token_id(id, config_path, entries), entry, config_path);
      }
    } catch (const json::exception& e) {
      fail("{}: invalid added_tokens_decoder: {}", config_path, e.what());
    }
  }

  const std::string merges_text = read_file(merges_path);
  std::istringstream lines(merges_text);
  std::string line;
  size_t line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ', 1);
    if (space == std::string::npos) fail("{}:{}: expected two tokens separated by a space", merges_path, line_number);
    tok->add_merge(std::string_view(line).substr(0, space), std::string_view(line).substr(space + 1));
  }

  apply_special_config(*tok, special_config, config_path);
  tok->finalize();
  return tok;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_hf_dir(const std::string& dir) {
  const fs::path root(dir);
  if (fs::exists(root / "tokenizer.json")) return load_tokenizer_json(dir, (root / "tokenizer.json").string());
  if (fs::exists(root / "vocab.json") && fs::exists(root / "merges.txt")) return load_vocab_and_merges(dir);
  fail("{}: no tokenizer.json and no vocab.json + merges.txt in this directory", dir);
}

}  // namespace tq
