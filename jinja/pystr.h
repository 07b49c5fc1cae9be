// Python `str` semantics over UTF-8 std::string. Jinja templates call Python string methods and
// filters (len, slicing, strip, split, upper, repr, ...) that count and classify code points, not
// bytes; these functions reproduce CPython 3.11 behaviour so rendered prompts match HF exactly.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tq::jinja::pystr {

// Code points of UTF-8 text. Bytes that are not valid UTF-8 become U+DC80..U+DCFF (Python's
// "surrogateescape"), and encode() turns those back into the original bytes, so decoding never
// loses data even for malformed input.
std::u32string decode(std::string_view text);
struct DecodedCodePoint {
  char32_t value;
  size_t length;  // bytes
};
DecodedCodePoint decode_one(std::string_view text, size_t offset);  // the code point at offset
std::string encode(std::u32string_view code_points);
void append_code_point(std::string& out, char32_t code_point);
size_t length(std::string_view text);  // len(s): number of code points

bool is_whitespace(char32_t c);  // the characters str.isspace(), str.split() and str.strip() use
bool is_printable(char32_t c);   // str.isprintable(), which decides what repr() escapes
bool is_cased(char32_t c);
bool is_alpha(char32_t c);
bool is_decimal(char32_t c);
bool is_digit(char32_t c);
bool is_numeric(char32_t c);

// Unicode simple case mappings (utf8proc) plus the one-to-many cases Python applies that chat
// text can contain: ß -> SS, the ﬀ..ﬆ ligatures, ŉ, İ -> i̇ and the Greek final sigma.
std::string upper(std::string_view text);
std::string lower(std::string_view text);
std::string title(std::string_view text);       // str.title()
std::string capitalize(std::string_view text);  // str.capitalize()
std::string swapcase(std::string_view text);

// str.isupper()/islower(): at least one cased character and no cased character of the other case.
bool is_upper_text(std::string_view text);
bool is_lower_text(std::string_view text);
// isalpha/isdigit/...: true when non-empty and every code point satisfies `predicate`.
bool all_code_points(std::string_view text, bool (*predicate)(char32_t));

enum class StripSide { kBoth, kLeft, kRight };
// str.strip/lstrip/rstrip; `chars` absent means whitespace.
std::string strip(std::string_view text, StripSide side, const std::optional<std::string>& chars);

// str.split/rsplit; `separator` absent means runs of whitespace. max_split < 0 is unlimited.
std::vector<std::string> split(std::string_view text, const std::optional<std::string>& separator,
                               int64_t max_split);
std::vector<std::string> rsplit(std::string_view text, const std::optional<std::string>& separator,
                                int64_t max_split);
std::vector<std::string> splitlines(std::string_view text, bool keep_ends);

// str.replace (count < 0: all); an empty `old` inserts `replacement` around every code point.
std::string replace(std::string_view text, std::string_view old, std::string_view replacement,
                    int64_t count);
// str.find/rfind in code points, -1 when absent.
int64_t find(std::string_view text, std::string_view needle);
int64_t rfind(std::string_view text, std::string_view needle);
int64_t count(std::string_view text, std::string_view needle);  // non-overlapping occurrences

std::string repr(std::string_view text);  // Python repr(): quotes and escapes

}  // namespace tq::jinja::pystr
