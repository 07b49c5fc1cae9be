#include "tokenizer/tokenizer.h"

#include "tokenizer/utf8.h"

namespace tq {

std::vector<TokenId> Tokenizer::encode_prompt(std::string_view text, bool parse_special) const {
  std::vector<TokenId> ids;
  if (special_.add_bos && special_.bos) ids.push_back(*special_.bos);
  std::vector<TokenId> body = encode(text, parse_special);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<TokenId>& ids, bool skip_special) const {
  std::string text;
  bool strip_pending = sp_strip_leading_space_;
  for (TokenId id : ids) {
    if (skip_special && is_special(id)) continue;
    std::string piece = token_bytes(id);
    if (piece.empty()) continue;
    // Only the very first emitted piece carries the prefix space SentencePiece added.
    if (strip_pending && text.empty() && piece.front() == ' ') piece.erase(0, 1);
    strip_pending = false;
    text += piece;
  }
  return text;
}

std::string StreamDecoder::push(TokenId id) {
  // Ids past the tokenizer's table (models pad their embedding, e.g. Qwen's 151936 rows for
  // 151665 tokens) have no text.
  if (id < 0 || id >= tok_.vocab_size()) return std::string();
  if (skip_special_ && tok_.is_special(id)) return std::string();
  std::string piece = tok_.token_bytes(id);
  if (piece.empty()) return std::string();
  if (first_) {
    first_ = false;
    if (tok_.strips_leading_space() && piece.front() == ' ') piece.erase(0, 1);
  }
  pending_ += piece;
  // Emit everything except a trailing character that more bytes could still complete.
  const size_t ready = utf8::emittable_prefix_length(pending_);
  std::string out = utf8::sanitize(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace tq
