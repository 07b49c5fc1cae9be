#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

namespace tq::utf8 {
namespace {

enum class SequenceStatus { kValid, kInvalid, kTruncated };

struct Sequence {
  SequenceStatus status;
  size_t length;  // valid: whole character; invalid: maximal invalid subpart (>= 1)
};

// Allowed range of the second byte for a lead byte (the Unicode "well-formed" table): this is
// what rules out overlong forms, surrogates and code points above U+10FFFF.
bool second_byte_ok(unsigned char lead, unsigned char b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

Sequence next_sequence(const unsigned char* p, size_t available) {
  const unsigned char lead = p[0];
  if (lead < 0x80) return {SequenceStatus::kValid, 1};
  size_t need;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
  } else {
    return {SequenceStatus::kInvalid, 1};
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= available) return {SequenceStatus::kTruncated, i};
    const unsigned char b = p[i];
    const bool ok = i == 1 ? second_byte_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {SequenceStatus::kInvalid, i};
  }
  return {SequenceStatus::kValid, need};
}

constexpr char kReplacement[] = "\xEF\xBF\xBD";

}  // namespace

void append_code_point(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t emittable_prefix_length(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Sequence seq = next_sequence(p + pos, bytes.size() - pos);
    if (seq.status == SequenceStatus::kTruncated) break;
    pos += seq.length;
  }
  return pos;
}

std::string sanitize(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const Sequence seq = next_sequence(p + pos, bytes.size() - pos);
    if (seq.status == SequenceStatus::kValid) {
      out.append(bytes.data() + pos, seq.length);
    } else {
      out += kReplacement;
    }
    pos += seq.length;
  }
  return out;
}

std::string nfc(std::string_view text) {
  // Pure ASCII is always in NFC; skipping utf8proc there keeps the common case cheap.
  bool ascii = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(text);
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &result,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return std::string(text);
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(result, &std::free);
  return std::string(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
}

}  // namespace tq::utf8
