#include "tokenizer/byte_level_bpe.h"

#include <queue>

#include "tokenizer/utf8.h"

namespace tq {
namespace {

// Words longer than this are merged without caching: they are rare (long runs of symbols or
// spaces) and would only bloat the cache.
constexpr size_t kMaxCachedWordBytes = 128;
constexpr size_t kMaxCachedWords = 1 << 16;

std::array<std::string, 256> make_byte_char_utf8() {
  std::array<std::string, 256> table;
  const auto& chars = ByteLevelBpeTokenizer::byte_to_char();
  for (size_t b = 0; b < 256; ++b) utf8::append_code_point(table[b], chars[b]);
  return table;
}

const std::array<std::string, 256>& byte_char_utf8() {
  static const std::array<std::string, 256> table = make_byte_char_utf8();
  return table;
}

// Inverse of byte_to_char, indexed by code point (all of them are below 0x144).
constexpr size_t kCharTableSize = 0x200;
std::array<int16_t, kCharTableSize> make_char_to_byte() {
  std::array<int16_t, kCharTableSize> table;
  table.fill(-1);
  const auto& chars = ByteLevelBpeTokenizer::byte_to_char();
  for (size_t b = 0; b < 256; ++b) table[chars[b]] = static_cast<int16_t>(b);
  return table;
}

}  // namespace

const std::array<char32_t, 256>& ByteLevelBpeTokenizer::byte_to_char() {
  // GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves; the others
  // (control characters, space, DEL, NBSP, soft hyphen) are moved to U+0100 upwards in order,
  // so that every byte is a visible character in vocab files.
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next_shifted = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t[b] = printable ? b : next_shifted++;
    }
    return t;
  }();
  return table;
}

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(PreTokenizer pre_tokenizer, ByteLevelBpeOptions options)
    : pre_tokenizer_(std::move(pre_tokenizer)), options_(options) {
  byte_tokens_.fill(-1);
}

void ByteLevelBpeTokenizer::add_merge(std::string_view left, std::string_view right) {
  const int32_t rank = next_rank_++;
  const std::optional<TokenId> left_id = vocab_.find(left);
  const std::optional<TokenId> right_id = vocab_.find(right);
  std::string joined;
  joined.reserve(left.size() + right.size());
  joined.append(left).append(right);
  const std::optional<TokenId> result = vocab_.find(joined);
  if (!left_id || !right_id || !result) {
    ++skipped_merges_;
    return;
  }
  // A repeated pair keeps its first (best) rank.
  merges_.emplace(pair_key(*left_id, *right_id), Merge{rank, *result});
}

void ByteLevelBpeTokenizer::prepare_encoding() {
  const auto& chars = byte_char_utf8();
  for (size_t b = 0; b < 256; ++b) byte_tokens_[b] = vocab_.find(chars[b]).value_or(-1);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  word_cache_.clear();
}

void ByteLevelBpeTokenizer::encode_segment(std::string_view text, bool /*at_input_start*/,
                                           std::vector<TokenId>& out) const {
  std::string normalized;
  std::string_view input = text;
  if (options_.nfc) {
    normalized = utf8::nfc(text);
    input = normalized;
  }
  if (options_.add_prefix_space && !input.empty() && input.front() != ' ') {
    normalized = " " + std::string(input);
    input = normalized;
  }
  for (std::string_view word : pre_tokenizer_.split(input)) encode_word(word, out);
}

void ByteLevelBpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = word_cache_.find(std::string(word));
    if (it != word_cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<TokenId> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (word_cache_.size() >= kMaxCachedWords) word_cache_.clear();
    word_cache_.emplace(std::string(word), std::move(ids));
  }
}

void ByteLevelBpeTokenizer::merge_word(std::string_view word, std::vector<TokenId>& out) const {
  if (options_.ignore_merges) {
    std::string mapped;
    for (char c : word) mapped += byte_char_utf8()[static_cast<unsigned char>(c)];
    if (std::optional<TokenId> whole = vocab_.find(mapped)) {
      out.push_back(*whole);
      return;
    }
  }

  // Symbols form a doubly linked list over the word's bytes; merging unlinks the right one.
  struct Symbol {
    TokenId id;
    int32_t prev;
    int32_t next;
  };
  std::vector<Symbol> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = {byte_tokens_[static_cast<unsigned char>(word[i])], static_cast<int32_t>(i) - 1,
                  i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1};
  }

  struct Candidate {
    int32_t rank;
    int32_t left;
    TokenId left_id;
    TokenId right_id;
    // Lowest rank first; among equal ranks the leftmost pair (HF and llama.cpp agree).
    bool operator<(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const TokenId left_id = symbols[static_cast<size_t>(left)].id;
    const TokenId right_id = symbols[static_cast<size_t>(right)].id;
    if (left_id < 0 || right_id < 0) return;
    auto it = merges_.find(pair_key(left_id, right_id));
    if (it != merges_.end()) queue.push({it->second.rank, left, left_id, right_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(candidate.left)];
    // Stale entries (a side was merged away or changed since) are skipped; a merged-away
    // symbol has id -1 so it can never match.
    if (left.id != candidate.left_id || left.next < 0) continue;
    const Symbol& right = symbols[static_cast<size_t>(left.next)];
    if (right.id != candidate.right_id) continue;
    left.id = merges_.at(pair_key(candidate.left_id, candidate.right_id)).result;
    const int32_t removed = left.next;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<size_t>(left.next)].prev = candidate.left;
    symbols[static_cast<size_t>(removed)].id = -1;
    consider(left.prev);
    consider(candidate.left);
  }

  // Bytes whose character is missing from the vocabulary (not in any real byte-level vocab)
  // are dropped, as llama.cpp does.
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    if (symbols[static_cast<size_t>(i)].id >= 0) out.push_back(symbols[static_cast<size_t>(i)].id);
  }
}

std::string ByteLevelBpeTokenizer::compute_token_bytes(TokenId id) const {
  const std::string& text = vocab_.text(id);
  switch (vocab_.type(id)) {
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUserDefined:
      return text;  // added tokens are stored as plain text, not byte characters
    case TokenType::kUnused:
      return std::string();
    default:
      break;
  }
  static const std::array<int16_t, kCharTableSize> char_to_byte = make_char_to_byte();
  std::string bytes;
  bytes.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t len = std::min(utf8::sequence_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
    char32_t cp = 0;
    if (len == 1) {
      cp = static_cast<unsigned char>(text[pos]);
    } else if (len == 2) {
      cp = ((static_cast<unsigned char>(text[pos]) & 0x1F) << 6) | (static_cast<unsigned char>(text[pos + 1]) & 0x3F);
    } else {
      cp = kCharTableSize;  // beyond the map: kept as is
    }
    if (cp < kCharTableSize && char_to_byte[cp] >= 0) {
      bytes += static_cast<char>(char_to_byte[cp]);
    } else {
      bytes.append(text, pos, len);  // not a byte character (malformed vocab entry): keep it
    }
    pos += len;
  }
  return bytes;
}

}  // namespace tq
