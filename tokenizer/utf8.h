// UTF-8 helpers the tokenizers need: sequence lengths, encoding a code point, validation with
// U+FFFD replacement, and Unicode NFC (through utf8proc).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace tq::utf8 {

// Length of the sequence announced by `lead` (1 for ASCII and for bytes that cannot start a
// sequence, so that walking a malformed string always advances).
inline size_t sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

void append_code_point(std::string& out, char32_t cp);

// Length of the longest prefix of `bytes` that can be emitted now: complete valid characters
// plus invalid bytes (each becomes U+FFFD via sanitize). Only a trailing sequence that could
// still become valid with more bytes is left out.
size_t emittable_prefix_length(std::string_view bytes);

// `bytes` with every invalid or truncated sequence replaced by U+FFFD (one per maximal
// invalid subpart, as the Unicode standard recommends and Python's "replace" does).
std::string sanitize(std::string_view bytes);

// Unicode Normalization Form C. Invalid UTF-8 is passed through unchanged (normalizing it is
// meaningless and the byte-level tokenizer can still encode it).
std::string nfc(std::string_view text);

}  // namespace tq::utf8
