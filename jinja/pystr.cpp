#include "jinja/pystr.h"

#include <utf8proc.h>

#include <algorithm>

#include "jinja/template_error.h"

namespace tq::jinja::pystr {
namespace {

constexpr char32_t kFirstEscapedByte = 0xDC00;  // surrogateescape: byte b <-> U+DC00 + b

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_upper_char(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LU; }
bool is_lower_char(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LL; }
bool is_title_char(char32_t c) { return category(c) == UTF8PROC_CATEGORY_LT; }

// Characters that Unicode's Final_Sigma rule skips over when looking for neighbouring letters.
bool is_case_ignorable(char32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return c == U'\'' || c == U'.' || c == U':' || c == U'^' || c == U'`' || c == 0xB7 ||
             c == 0x2019;
  }
}

// Full (one-to-many) upper-case mappings of SpecialCasing.txt that Python applies; everything
// else uses the simple mapping.
std::u32string_view special_upper(char32_t c) {
  switch (c) {
    case 0x00DF: return U"SS";
    case 0x0149: return U"\u02BCN";
    case 0x01F0: return U"J\u030C";
    case 0x0390: return U"\u0399\u0308\u0301";
    case 0x03B0: return U"\u03A5\u0308\u0301";
    case 0x0587: return U"\u0535\u0552";
    case 0x1E96: return U"H\u0331";
    case 0x1E97: return U"T\u0308";
    case 0x1E98: return U"W\u030A";
    case 0x1E99: return U"Y\u030A";
    case 0x1E9A: return U"A\u02BE";
    case 0xFB00: return U"FF";
    case 0xFB01: return U"FI";
    case 0xFB02: return U"FL";
    case 0xFB03: return U"FFI";
    case 0xFB04: return U"FFL";
    case 0xFB05: return U"ST";
    case 0xFB06: return U"ST";
    default: return {};
  }
}

std::u32string_view special_title(char32_t c) {
  switch (c) {
    case 0x00DF: return U"Ss";
    case 0x0149: return U"\u02BCN";
    case 0xFB00: return U"Ff";
    case 0xFB01: return U"Fi";
    case 0xFB02: return U"Fl";
    case 0xFB03: return U"Ffi";
    case 0xFB04: return U"Ffl";
    case 0xFB05: return U"St";
    case 0xFB06: return U"St";
    default: return {};
  }
}

void append_upper(std::u32string& out, char32_t c) {
  if (auto special = special_upper(c); !special.empty()) {
    out += special;
  } else {
    out += static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
  }
}

void append_title(std::u32string& out, char32_t c) {
  if (auto special = special_title(c); !special.empty()) {
    out += special;
  } else {
    out += static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
  }
}

// Lower-cases text[index], which needs its neighbours for the Greek final sigma.
void append_lower(std::u32string& out, const std::u32string& text, size_t index) {
  char32_t c = text[index];
  if (c == 0x0130) {  // İ -> i + combining dot above
    out += U"i\u0307";
    return;
  }
  if (c == 0x03A3) {
    bool cased_before = false;
    for (size_t j = index; j-- > 0;) {
      if (is_case_ignorable(text[j])) continue;
      cased_before = is_cased(text[j]);
      break;
    }
    bool cased_after = false;
    for (size_t j = index + 1; j < text.size(); ++j) {
      if (is_case_ignorable(text[j])) continue;
      cased_after = is_cased(text[j]);
      break;
    }
    out += (cased_before && !cased_after) ? char32_t{0x03C2} : char32_t{0x03C3};
    return;
  }
  out += static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}

std::u32string code_point_set(const std::optional<std::string>& chars) {
  return chars ? decode(*chars) : std::u32string{};
}

}  // namespace

DecodedCodePoint decode_one(std::string_view text, size_t i) {
  auto byte = static_cast<unsigned char>(text[i]);
  if (byte < 0x80) return {byte, 1};
  size_t needed = 0;
  char32_t code_point = 0;
  unsigned char second_min = 0x80, second_max = 0xBF;
  if (byte >= 0xC2 && byte <= 0xDF) {
    needed = 1;
    code_point = byte & 0x1F;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    needed = 2;
    code_point = byte & 0x0F;
    if (byte == 0xE0) second_min = 0xA0;  // no overlong forms
    if (byte == 0xED) second_max = 0x9F;  // no UTF-16 surrogates
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    needed = 3;
    code_point = byte & 0x07;
    if (byte == 0xF0) second_min = 0x90;
    if (byte == 0xF4) second_max = 0x8F;  // nothing above U+10FFFF
  }
  bool valid = needed > 0 && i + needed < text.size();
  if (valid) {
    auto second = static_cast<unsigned char>(text[i + 1]);
    valid = second >= second_min && second <= second_max;
    for (size_t k = 1; valid && k <= needed; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      valid = is_continuation(next);
      code_point = (code_point << 6) | (next & 0x3F);
    }
  }
  if (!valid) return {kFirstEscapedByte + byte, 1};
  return {code_point, needed + 1};
}

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    DecodedCodePoint decoded = decode_one(text, i);
    out += decoded.value;
    i += decoded.length;
  }
  return out;
}

void append_code_point(std::string& out, char32_t c) {
  if (c >= kFirstEscapedByte + 0x80 && c <= kFirstEscapedByte + 0xFF) {
    out += static_cast<char>(c - kFirstEscapedByte);
  } else if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) append_code_point(out, c);
  return out;
}

size_t length(std::string_view text) {
  bool ascii = std::all_of(text.begin(), text.end(),
                           [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  return ascii ? text.size() : decode(text).size();
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_printable(char32_t c) {
  if (c == U' ') return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
      return false;
    default:
      return c < kFirstEscapedByte || c > kFirstEscapedByte + 0xFF;
  }
}

bool is_cased(char32_t c) {
  return is_upper_char(c) || is_lower_char(c) || is_title_char(c);
}

bool is_alpha(char32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool is_decimal(char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; }

bool is_digit(char32_t c) {
  // Decimal digits plus the superscript/subscript digits Python also counts as digits.
  return is_decimal(c) || c == 0xB2 || c == 0xB3 || c == 0xB9 || c == 0x2070 ||
         (c >= 0x2074 && c <= 0x2079) || (c >= 0x2080 && c <= 0x2089);
}

bool is_numeric(char32_t c) {
  auto cat = category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

std::string upper(std::string_view text) {
  std::u32string out;
  for (char32_t c : decode(text)) append_upper(out, c);
  return encode(out);
}

std::string lower(std::string_view text) {
  std::u32string source = decode(text);
  std::u32string out;
  for (size_t i = 0; i < source.size(); ++i) append_lower(out, source, i);
  return encode(out);
}

std::string title(std::string_view text) {
  std::u32string source = decode(text);
  std::u32string out;
  bool previous_is_cased = false;
  for (size_t i = 0; i < source.size(); ++i) {
    if (previous_is_cased) {
      append_lower(out, source, i);
    } else {
      append_title(out, source[i]);
    }
    previous_is_cased = is_cased(source[i]);
  }
  return encode(out);
}

std::string capitalize(std::string_view text) {
  std::u32string source = decode(text);
  std::u32string out;
  for (size_t i = 0; i < source.size(); ++i) {
    if (i == 0) {
      append_title(out, source[i]);
    } else {
      append_lower(out, source, i);
    }
  }
  return encode(out);
}

std::string swapcase(std::string_view text) {
  std::u32string source = decode(text);
  std::u32string out;
  for (size_t i = 0; i < source.size(); ++i) {
    if (is_upper_char(source[i])) {
      append_lower(out, source, i);
    } else if (is_lower_char(source[i])) {
      append_upper(out, source[i]);
    } else {
      out += source[i];
    }
  }
  return encode(out);
}

bool is_upper_text(std::string_view text) {
  bool has_cased = false;
  for (char32_t c : decode(text)) {
    if (is_lower_char(c) || is_title_char(c)) return false;
    if (is_upper_char(c)) has_cased = true;
  }
  return has_cased;
}

bool is_lower_text(std::string_view text) {
  bool has_cased = false;
  for (char32_t c : decode(text)) {
    if (is_upper_char(c) || is_title_char(c)) return false;
    if (is_lower_char(c)) has_cased = true;
  }
  return has_cased;
}

bool all_code_points(std::string_view text, bool (*predicate)(char32_t)) {
  std::u32string source = decode(text);
  return !source.empty() && std::all_of(source.begin(), source.end(), predicate);
}

std::string strip(std::string_view text, StripSide side, const std::optional<std::string>& chars) {
  // Only the ends are decoded: message contents can be long and are often stripped.
  std::u32string set = code_point_set(chars);
  auto removable = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : is_whitespace(c);
  };
  size_t begin = 0, end = text.size();
  if (side != StripSide::kRight) {
    while (begin < end) {
      DecodedCodePoint first = decode_one(text.substr(0, end), begin);
      if (!removable(first.value)) break;
      begin += first.length;
    }
  }
  if (side != StripSide::kLeft) {
    while (end > begin) {
      // The last code point starts at most 3 continuation bytes back; if those bytes do not
      // decode as one code point ending at `end`, the last byte stands alone (escaped).
      size_t start = end - 1;
      while (start > begin && end - start < 4 && is_continuation(static_cast<unsigned char>(text[start]))) --start;
      DecodedCodePoint last = decode_one(text.substr(0, end), start);
      if (start + last.length != end) last = decode_one(text.substr(0, end), end - 1);
      if (!removable(last.value)) break;
      end -= last.length;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view text, const std::optional<std::string>& separator,
                               int64_t max_split) {
  std::vector<std::string> parts;
  if (separator) {
    if (separator->empty()) raise_error("ValueError: empty separator");
    size_t start = 0;
    while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
      size_t found = text.find(*separator, start);
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(start, found - start));
      start = found + separator->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  std::u32string source = decode(text);
  size_t i = 0;
  while (true) {
    while (i < source.size() && is_whitespace(source[i])) ++i;
    if (i == source.size()) break;
    if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
      // The remainder keeps its trailing whitespace, as in Python.
      parts.push_back(encode(std::u32string_view(source).substr(i)));
      break;
    }
    size_t start = i;
    while (i < source.size() && !is_whitespace(source[i])) ++i;
    parts.push_back(encode(std::u32string_view(source).substr(start, i - start)));
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view text, const std::optional<std::string>& separator,
                                int64_t max_split) {
  std::vector<std::string> parts;
  if (separator) {
    if (separator->empty()) raise_error("ValueError: empty separator");
    size_t end = text.size();
    while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
      if (end < separator->size()) break;
      size_t found = text.rfind(*separator, end - separator->size());
      if (found == std::string_view::npos) break;
      parts.emplace_back(text.substr(found + separator->size(), end - found - separator->size()));
      end = found;
    }
    parts.emplace_back(text.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  std::u32string source = decode(text);
  size_t i = source.size();
  while (true) {
    while (i > 0 && is_whitespace(source[i - 1])) --i;
    if (i == 0) break;
    if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
      parts.push_back(encode(std::u32string_view(source).substr(0, i)));
      break;
    }
    size_t end = i;
    while (i > 0 && !is_whitespace(source[i - 1])) --i;
    parts.push_back(encode(std::u32string_view(source).substr(i, end - i)));
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view text, bool keep_ends) {
  std::u32string source = decode(text);
  std::vector<std::string> lines;
  size_t start = 0, i = 0;
  while (i < source.size()) {
    char32_t c = source[i];
    bool is_break = c == U'\n' || c == U'\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
                    c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    size_t break_length = (c == U'\r' && i + 1 < source.size() && source[i + 1] == U'\n') ? 2 : 1;
    size_t end = keep_ends ? i + break_length : i;
    lines.push_back(encode(std::u32string_view(source).substr(start, end - start)));
    i += break_length;
    start = i;
  }
  if (start < source.size()) lines.push_back(encode(std::u32string_view(source).substr(start)));
  return lines;
}

std::string replace(std::string_view text, std::string_view old, std::string_view replacement,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string source = decode(text);
    int64_t done = 0;
    for (char32_t c : source) {
      if (count < 0 || done < count) {
        check_string_size(out.size() + replacement.size(), "replace's result");
        out += replacement;
        ++done;
      }
      append_code_point(out, c);
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = text.find(old, start);
    if (found == std::string_view::npos) break;
    check_string_size(out.size() + (found - start) + replacement.size(), "replace's result");
    out += text.substr(start, found - start);
    out += replacement;
    start = found + old.size();
    ++done;
  }
  out += text.substr(start);
  return out;
}

int64_t find(std::string_view text, std::string_view needle) {
  size_t found = text.find(needle);
  if (found == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(text.substr(0, found)));
}

int64_t rfind(std::string_view text, std::string_view needle) {
  size_t found = text.rfind(needle);
  if (found == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(text.substr(0, found)));
}

int64_t count(std::string_view text, std::string_view needle) {
  if (needle.empty()) return static_cast<int64_t>(length(text)) + 1;
  int64_t occurrences = 0;
  for (size_t found = text.find(needle); found != std::string_view::npos;
       found = text.find(needle, found + needle.size())) {
    ++occurrences;
  }
  return occurrences;
}

std::string repr(std::string_view text) {
  std::u32string source = decode(text);
  bool has_single = source.find(U'\'') != std::u32string::npos;
  bool has_double = source.find(U'"') != std::u32string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : source) {
    if (c == static_cast<char32_t>(quote) || c == U'\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == U'\t') {
      out += "\\t";
    } else if (c == U'\n') {
      out += "\\n";
    } else if (c == U'\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c < 0x7F || is_printable(c)) {
      append_code_point(out, c);
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    }
  }
  out += quote;
  return out;
}

}  // namespace tq::jinja::pystr
