#include "tokenizer/sentencepiece_bpe.h"

#include <fmt/format.h>

#include <limits>
#include <queue>

#include "tokenizer/utf8.h"

namespace tq {
namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out += kSpaceMarker;
    } else {
      out += c;
    }
  }
  return out;
}

// Parses "<0xNN>"; -1 if `text` is not a byte token.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      value |= c - 'a' + 10;
    } else {
      return -1;
    }
  }
  return value;
}

}  // namespace

SentencePieceBpeTokenizer::SentencePieceBpeTokenizer(SpacePrefix prefix) : prefix_(prefix) {
  sp_strip_leading_space_ = prefix != SpacePrefix::kNone;
  byte_tokens_.fill(-1);
}

void SentencePieceBpeTokenizer::prepare_encoding() {
  for (int b = 0; b < 256; ++b) {
    std::optional<TokenId> id = vocab_.find(fmt::format("<0x{:02X}>", b));
    if (!id) id = vocab_.find(std::string(1, static_cast<char>(b)));
    byte_tokens_[static_cast<size_t>(b)] = id.value_or(-1);
  }
}

bool SentencePieceBpeTokenizer::can_merge_into(TokenId id) const {
  // llama.cpp merges into any vocabulary entry that spells the pair. Excluded: the unused slots
  // of a sparse HF vocabulary, and pieces that a tokenizer.json's merges never produce (their
  // score is -infinity, see load_hf.cpp).
  return vocab_.type(id) != TokenType::kUnused && vocab_.score(id) != -std::numeric_limits<float>::infinity();
}

void SentencePieceBpeTokenizer::append_byte_fallback(std::string_view piece, std::vector<TokenId>& out) const {
  for (char c : piece) {
    const TokenId id = byte_tokens_[static_cast<unsigned char>(c)];
    if (id >= 0) {
      out.push_back(id);
    } else if (special_.unk) {
      out.push_back(*special_.unk);
    }
  }
}

void SentencePieceBpeTokenizer::encode_segment(std::string_view text, bool at_input_start,
                                               std::vector<TokenId>& out) const {
  // Metaspace looks at the text after spaces became '▁', so a literal '▁' counts as a space.
  const bool starts_with_space = (!text.empty() && text.front() == ' ') || text.substr(0, 3) == kSpaceMarker;
  bool prefix = false;
  switch (prefix_) {
    case SpacePrefix::kNone: break;
    case SpacePrefix::kEverySegment: prefix = true; break;
    case SpacePrefix::kMetaspaceAlways: prefix = !starts_with_space; break;
    case SpacePrefix::kMetaspaceFirst: prefix = at_input_start && !starts_with_space; break;
  }
  const std::string escaped = escape_spaces(prefix ? " " + std::string(text) : std::string(text));

  // One symbol per UTF-8 character, linked so that merging can unlink the right neighbour.
  struct Symbol {
    size_t offset;
    size_t length;  // 0 once merged into its left neighbour
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < escaped.size();) {
    const size_t len = std::min(utf8::sequence_length(static_cast<unsigned char>(escaped[pos])), escaped.size() - pos);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({pos, len, index - 1, pos + len < escaped.size() ? index + 1 : -1});
    pos += len;
  }

  struct Bigram {
    float score;
    int32_t left;
    int32_t right;
    size_t length;
    // Highest score first; on ties the leftmost pair.
    bool operator<(const Bigram& other) const {
      return score != other.score ? score < other.score : left > other.left;
    }
  };
  std::priority_queue<Bigram> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    const Symbol& b = symbols[static_cast<size_t>(right)];
    const std::string_view joined(escaped.data() + a.offset, a.length + b.length);
    const std::optional<TokenId> id = vocab_.find(joined);
    if (!id || !can_merge_into(*id)) return;
    queue.push({vocab_.score(*id), left, right, joined.size()});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Bigram bigram = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(bigram.left)];
    Symbol& right = symbols[static_cast<size_t>(bigram.right)];
    // Symbols only grow, so a changed total length means this bigram is stale.
    if (left.length == 0 || right.length == 0 || left.next != bigram.right ||
        left.length + right.length != bigram.length) {
      continue;
    }
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = bigram.left;
    consider(left.prev, bigram.left);
    consider(bigram.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& symbol = symbols[static_cast<size_t>(i)];
    const std::string_view piece(escaped.data() + symbol.offset, symbol.length);
    if (std::optional<TokenId> id = vocab_.find(piece)) {
      out.push_back(*id);
    } else {
      append_byte_fallback(piece, out);
    }
  }
}

std::string SentencePieceBpeTokenizer::compute_token_bytes(TokenId id) const {
  const std::string& text = vocab_.text(id);
  switch (vocab_.type(id)) {
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUserDefined:
      return text;
    case TokenType::kByte: {
      const int byte = parse_byte_token(text);
      return byte >= 0 ? std::string(1, static_cast<char>(byte)) : text;
    }
    case TokenType::kUnused:
      return std::string();
    default: {
      std::string bytes;
      bytes.reserve(text.size());
      for (size_t pos = 0; pos < text.size();) {
        if (text.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
          bytes += ' ';
          pos += kSpaceMarker.size();
        } else {
          bytes += text[pos++];
        }
      }
      return bytes;
    }
  }
}

}  // namespace tq
