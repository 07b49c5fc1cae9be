#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

#include "errors/error.h"

namespace tq {

// The regexes are the ones of the models' tokenizer.json files (as quoted in llama.cpp's
// llama-vocab.cpp); PCRE2 runs them unchanged, case-insensitive groups included.
const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek LLM's letter class lists the cased letters explicitly; it is spelled with code point
// escapes because several members (U+1FBE, U+2126, U+212A, ...) are not NFC-stable and would be
// silently changed by any tool that normalizes source text.
const char* const kDeepseekLlmLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A})"
    R"(\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556})"
    R"(\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF})"
    R"(\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D})"
    R"(\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3})"
    R"(\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D})"
    R"(\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})"
    R"(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF})"
    R"(\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F})"
    R"(\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";

const char* const kDeepseekPunctuation =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";

const char* const kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct NamedPreset {
  std::array<const char*, 6> names;  // aliases llama.cpp accepts for the same behaviour
  PreTokenizerPreset preset;
};

const std::vector<NamedPreset>& named_presets() {
  static const std::vector<NamedPreset> presets = {
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais", "gpt2"}, {"gpt-2", {kGpt2SplitPattern}}},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral", "dbrx"},
       {"llama-bpe", {kLlama3Pattern}, false, true, true}},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", nullptr, nullptr},
       {"qwen2", {kQwen2Pattern}, true}},
      {{"deepseek-llm", nullptr, nullptr, nullptr, nullptr, nullptr},
       {"deepseek-llm",
        {"[\\r\\n]", kDeepseekLlmLetters, kDeepseekPunctuation, "\\s+$", kDeepseekCjk, "\\p{N}+"}}},
      {{"deepseek-coder", nullptr, nullptr, nullptr, nullptr, nullptr},
       {"deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kDeepseekCjk, "\\p{N}"}}},
      // SmolLM2's tokenizer.json: Digits(individual_digits) then ByteLevel(use_regex).
      {{"smollm", "starcoder", "refact", "codeshell", "command-r", "exaone"},
       {"smollm", {"\\p{N}", kGpt2SplitPattern}}},
  };
  return presets;
}

}  // namespace

std::optional<PreTokenizerPreset> pre_tokenizer_preset(std::string_view name) {
  for (const NamedPreset& entry : named_presets()) {
    for (const char* alias : entry.names) {
      if (alias != nullptr && name == alias) return entry.preset;
    }
  }
  return std::nullopt;
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {
  for (const std::string& pattern : patterns_) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    // MATCH_INVALID_UTF: the input is arbitrary bytes; invalid sequences must not be UB and
    // simply never match. DOLLAR_ENDONLY: `$` means the end of the piece, as in HF/llama.cpp.
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                                     &error_code, &error_offset, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error_code, message.data(), message.size());
      fail("pre-tokenizer regex does not compile at offset {}: {} (pattern: {})", error_offset,
           reinterpret_cast<const char*>(message.data()), pattern);
    }
    // JIT is an optimisation only: when unavailable, pcre2_match interprets the pattern.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto compiled = std::make_unique<Compiled>();
    compiled->code = code;
    compiled_.push_back(std::move(compiled));
  }
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  for (size_t index = 0; index < compiled_.size(); ++index) {
    const auto& compiled = compiled_[index];
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(compiled->code, nullptr), &pcre2_match_data_free);
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t gap_start = 0;
      size_t search_from = 0;
      while (search_from < piece.size()) {
        const int rc = pcre2_match(compiled->code, subject, piece.size(), search_from, 0, match.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;  // no further match: the rest is a gap
        if (rc < 0) {
          // Match/depth/heap limits, JIT stack exhaustion...: silently treating the rest as one
          // gap would encode differently from the reference tokenizer, so refuse instead.
          std::array<PCRE2_UCHAR, 256> message{};
          pcre2_get_error_message(rc, message.data(), message.size());
          fail("pre-tokenizer regex {} of {} failed on a {}-byte piece at offset {}: {} (PCRE2 error {}; pattern: {})",
               index + 1, compiled_.size(), piece.size(), search_from, reinterpret_cast<const char*>(message.data()),
               rc, patterns_[index]);
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
        const size_t begin = ovector[0];
        const size_t end = ovector[1];
        if (end == begin) {
          // An empty match splits nothing; step over one character and keep searching.
          search_from = begin + 1;
          while (search_from < piece.size() && (static_cast<unsigned char>(piece[search_from]) & 0xC0) == 0x80) {
            ++search_from;
          }
          continue;
        }
        if (begin > gap_start) next.push_back(piece.substr(gap_start, begin - gap_start));
        next.push_back(piece.substr(begin, end - begin));
        gap_start = end;
        search_from = end;
      }
      if (gap_start < piece.size()) next.push_back(piece.substr(gap_start));
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace tq
