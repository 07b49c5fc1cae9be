#include "jinja/parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>

#include "jinja/pystr.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int count_newlines(std::string_view text) {
  return static_cast<int>(std::count(text.begin(), text.end(), '\n'));
}

// jinja2 first turns \r\n and \r into \n, then drops one trailing newline of the template.
std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's "unicode-escape" decoding, which jinja2 applies to string literals.
std::string unescape_string(std::string_view body, int line) {
  std::string out;
  size_t i = 0;
  auto hex_value = [&](size_t start, size_t digits, char kind) -> uint32_t {
    if (start + digits > body.size()) raise_error_at(line, "truncated \\{} escape in string literal", kind);
    uint32_t value = 0;
    for (size_t k = start; k < start + digits; ++k) {
      char c = body[k];
      int digit = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (digit < 0) raise_error_at(line, "truncated \\{} escape in string literal", kind);
      value = value * 16 + static_cast<uint32_t>(digit);
    }
    return value;
  };
  while (i < body.size()) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      ++i;
      continue;
    }
    char escaped = body[i + 1];
    i += 2;
    switch (escaped) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': pystr::append_code_point(out, hex_value(i, 2, 'x')); i += 2; break;
      case 'u': pystr::append_code_point(out, hex_value(i, 4, 'u')); i += 4; break;
      case 'U': {
        uint32_t value = hex_value(i, 8, 'U');
        if (value > 0x10FFFF) raise_error_at(line, "illegal Unicode character in string literal");
        pystr::append_code_point(out, value);
        i += 8;
        break;
      }
      case 'N': raise_error_at(line, "unsupported: \\N{{...}} escape in string literal");
      default:
        if (escaped >= '0' && escaped <= '7') {
          uint32_t value = static_cast<uint32_t>(escaped - '0');
          for (int extra = 0; extra < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++extra) {
            value = value * 8 + static_cast<uint32_t>(body[i++] - '0');
          }
          pystr::append_code_point(out, value);
        } else if (static_cast<unsigned char>(escaped) >= 0x80) {
          // jinja2 backslash-escapes non-ASCII text before decoding, so "\é" becomes "\xe9".
          std::u32string rest = pystr::decode(body.substr(i - 1));
          char32_t code_point = rest.empty() ? 0 : rest[0];
          out += code_point <= 0xFF     ? fmt::format("\\x{:02x}", static_cast<uint32_t>(code_point))
                 : code_point <= 0xFFFF ? fmt::format("\\u{:04x}", static_cast<uint32_t>(code_point))
                                        : fmt::format("\\U{:08x}", static_cast<uint32_t>(code_point));
          i = i - 1 + pystr::encode(rest.substr(0, 1)).size();
        } else {
          out += '\\';
          out += escaped;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : source_(normalize_source(source)) {}

  std::vector<Token> run() {
    while (pos_ < source_.size()) {
      size_t tag = find_tag_start(pos_);
      if (tag == std::string::npos) {
        emit_data(source_.substr(pos_), count_newlines(std::string_view(source_).substr(pos_)));
        break;
      }
      char kind = source_[tag + 1];
      char sign = tag + 2 < source_.size() ? source_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      std::string_view text = std::string_view(source_).substr(pos_, tag - pos_);
      size_t raw_end = kind == '%' ? match_raw_begin(tag) : std::string::npos;
      emit_text_before_tag(text, sign, kind != '{');
      line_starting_ = false;
      if (raw_end != std::string::npos) {
        line_starting_ = source_[raw_end - 1] == '\n';
        line_ += count_newlines(std::string_view(source_).substr(tag, raw_end - tag));
        pos_ = raw_end;
        lex_raw_body();
        continue;
      }
      pos_ = tag + 2 + (sign != '\0' ? 1 : 0);
      if (kind == '#') {
        lex_comment();
      } else {
        lex_tag(kind == '{');
      }
    }
    Token end;
    end.type = TokenType::kEnd;
    end.line = line_;
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t i = source_.find('{', from); i != std::string::npos; i = source_.find('{', i + 1)) {
      if (i + 1 < source_.size() && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // Skips what Python's regex \s matches: ASCII and Unicode whitespace (e.g. U+00A0).
  size_t skip_whitespace(size_t i) const {
    while (i < source_.size()) {
      if (is_ascii_space(source_[i])) {
        ++i;
        continue;
      }
      if (static_cast<unsigned char>(source_[i]) < 0x80) break;
      std::u32string next = pystr::decode(std::string_view(source_).substr(i, std::min<size_t>(4, source_.size() - i)));
      if (next.empty() || !pystr::is_whitespace(next[0])) break;
      i += pystr::encode(next.substr(0, 1)).size();
    }
    return i;
  }

  // `{%[-+]? raw (-%}\s*|%})`: returns the end of the match, or npos when this is no raw tag.
  size_t match_raw_begin(size_t tag) const {
    size_t i = tag + 2;
    if (i < source_.size() && (source_[i] == '-' || source_[i] == '+')) ++i;
    i = skip_whitespace(i);
    if (source_.compare(i, 3, "raw") != 0) return std::string::npos;
    i = skip_whitespace(i + 3);
    if (source_.compare(i, 3, "-%}") == 0) return skip_whitespace(i + 3);
    if (source_.compare(i, 2, "%}") == 0) return i + 2;  // note: trim_blocks does not apply here
    return std::string::npos;
  }

  // Whitespace control for the text in front of a tag: `-` strips all whitespace; otherwise
  // lstrip_blocks removes spaces and tabs between the line start and a block or comment tag.
  void emit_text_before_tag(std::string_view text, char sign, bool lstrip_applies) {
    int newlines = count_newlines(text);
    std::string kept(text);
    if (sign == '-') {
      kept = pystr::strip(text, pystr::StripSide::kRight, std::nullopt);
    } else if (sign != '+' && lstrip_applies) {
      size_t line_start = text.rfind('\n');
      line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
      if (line_start > 0 || line_starting_) {
        std::string_view tail = text.substr(line_start);
        std::u32string tail_code_points = pystr::decode(tail);
        bool only_whitespace = !tail_code_points.empty() &&
                               std::all_of(tail_code_points.begin(), tail_code_points.end(), pystr::is_whitespace);
        if (only_whitespace) kept = std::string(text.substr(0, line_start));
      }
    }
    emit_data(std::move(kept), newlines);
  }

  void emit_data(std::string text, int newlines) {
    if (!text.empty()) push(TokenType::kData, std::move(text));
    line_ += newlines;
  }

  void push(TokenType type, std::string text) {
    Token token;
    token.type = type;
    token.text = std::move(text);
    token.line = line_;
    tokens_.push_back(std::move(token));
  }

  // After a closing tag: `-` eats all following whitespace, `+` nothing, and trim_blocks one
  // newline (block and comment tags only).
  void finish_closing_tag(size_t after_tag, char sign, bool trims_newline) {
    size_t end = after_tag;
    if (sign == '-') {
      end = skip_whitespace(after_tag);
    } else if (sign != '+' && trims_newline && end < source_.size() && source_[end] == '\n') {
      ++end;
    }
    line_ += count_newlines(std::string_view(source_).substr(pos_, end - pos_));
    line_starting_ = end > after_tag && source_[end - 1] == '\n';
    pos_ = end;
  }

  void lex_comment() {
    size_t close = source_.find("#}", pos_);
    if (close == std::string::npos) raise_error_at(line_, "missing end of comment tag");
    char sign = (close > pos_ && (source_[close - 1] == '-' || source_[close - 1] == '+')) ? source_[close - 1] : '\0';
    finish_closing_tag(close + 2, sign, true);
  }

  void lex_raw_body() {
    for (size_t i = source_.find("{%", pos_); i != std::string::npos; i = source_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = '\0';
      if (j < source_.size() && (source_[j] == '-' || source_[j] == '+')) sign = source_[j++];
      j = skip_whitespace(j);
      if (source_.compare(j, 6, "endraw") != 0) continue;
      j = skip_whitespace(j + 6);
      char close_sign = '\0';
      if (j < source_.size() && (source_[j] == '-' || source_[j] == '+')) close_sign = source_[j++];
      if (source_.compare(j, 2, "%}") != 0) continue;
      emit_text_before_tag(std::string_view(source_).substr(pos_, i - pos_), sign, true);
      pos_ = i;
      finish_closing_tag(j + 2, close_sign, true);
      return;
    }
    raise_error_at(line_, "missing end of raw directive");
  }

  void lex_tag(bool is_variable) {
    push(is_variable ? TokenType::kVariableBegin : TokenType::kBlockBegin, "");
    std::vector<char> open_brackets;
    while (true) {
      if (pos_ >= source_.size()) {
        raise_error_at(line_, "unexpected end of template: missing '{}'", is_variable ? "}}" : "%}");
      }
      if (open_brackets.empty() && try_close_tag(is_variable)) return;
      if (size_t after = skip_whitespace(pos_); after > pos_) {
        line_ += count_newlines(std::string_view(source_).substr(pos_, after - pos_));
        pos_ = after;
      } else if (lex_number() || lex_name() || lex_string()) {
      } else {
        lex_operator(open_brackets);
      }
    }
  }

  bool try_close_tag(bool is_variable) {
    std::string_view rest = std::string_view(source_).substr(pos_);
    std::string_view close = is_variable ? "}}" : "%}";
    char sign = '\0';
    if (rest.substr(0, 2) == close) {
    } else if (rest.size() >= 3 && rest.substr(1, 2) == close &&
               (rest[0] == '-' || (rest[0] == '+' && !is_variable))) {
      sign = rest[0];
    } else {
      return false;
    }
    push(is_variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, "");
    finish_closing_tag(pos_ + (sign ? 3 : 2), sign, !is_variable);
    return true;
  }

  // Digits with single underscores between them: \d+(_\d+)*
  size_t match_digits(size_t i, bool (*digit)(char)) const {
    if (i >= source_.size() || !digit(source_[i])) return std::string::npos;
    while (i < source_.size()) {
      if (digit(source_[i])) {
        ++i;
      } else if (source_[i] == '_' && i + 1 < source_.size() && digit(source_[i + 1])) {
        i += 2;
      } else {
        break;
      }
    }
    return i;
  }

  bool lex_number() {
    if (!is_digit(source_[pos_])) return false;
    std::optional<size_t> float_end;
    if (pos_ == 0 || source_[pos_ - 1] != '.') {
      size_t integer_end = match_digits(pos_, is_digit);
      size_t fraction_end = std::string::npos;
      if (integer_end < source_.size() && source_[integer_end] == '.') {
        fraction_end = match_digits(integer_end + 1, is_digit);
      }
      size_t exponent_start = fraction_end != std::string::npos ? fraction_end : integer_end;
      if (exponent_start < source_.size() && (source_[exponent_start] == 'e' || source_[exponent_start] == 'E')) {
        size_t k = exponent_start + 1;
        if (k < source_.size() && (source_[k] == '+' || source_[k] == '-')) ++k;
        size_t exponent_end = match_digits(k, is_digit);
        if (exponent_end != std::string::npos) float_end = exponent_end;
      }
      if (!float_end && fraction_end != std::string::npos) float_end = fraction_end;
    }
    if (float_end) {
      std::string digits;
      for (size_t k = pos_; k < *float_end; ++k) {
        if (source_[k] != '_') digits += source_[k];
      }
      Token token;
      token.type = TokenType::kFloat;
      token.text = digits;
      token.floating = std::strtod(digits.c_str(), nullptr);
      token.line = line_;
      tokens_.push_back(std::move(token));
      pos_ = *float_end;
      return true;
    }
    lex_integer();
    return true;
  }

  void lex_integer() {
    int base = 10;
    size_t start = pos_, end = std::string::npos;
    char prefix = pos_ + 1 < source_.size() ? static_cast<char>(source_[pos_ + 1] | 0x20) : '\0';
    auto radix_digits = [&](bool (*digit)(char)) {
      // 0x(_?[0-9a-f])+ : an underscore may also follow the prefix directly.
      size_t i = pos_ + 2;
      size_t last = std::string::npos;
      while (i < source_.size()) {
        size_t k = source_[i] == '_' ? i + 1 : i;
        if (k < source_.size() && digit(source_[k])) {
          i = k + 1;
          last = i;
        } else {
          break;
        }
      }
      return last;
    };
    if (source_[pos_] == '0' && prefix == 'b') {
      base = 2;
      end = radix_digits([](char c) { return c == '0' || c == '1'; });
    } else if (source_[pos_] == '0' && prefix == 'o') {
      base = 8;
      end = radix_digits([](char c) { return c >= '0' && c <= '7'; });
    } else if (source_[pos_] == '0' && prefix == 'x') {
      base = 16;
      end = radix_digits([](char c) { return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); });
    }
    if (end != std::string::npos) {
      start = pos_ + 2;
    } else if (source_[pos_] == '0') {
      base = 10;
      end = match_digits(pos_, [](char c) { return c == '0'; });
    } else {
      base = 10;
      end = match_digits(pos_, is_digit);
    }
    std::string digits;
    for (size_t k = start; k < end; ++k) {
      if (source_[k] != '_') digits += source_[k];
    }
    errno = 0;
    long long value = std::strtoll(digits.c_str(), nullptr, base);
    if (errno == ERANGE) raise_error_at(line_, "integer literal {} does not fit in 64 bits", source_.substr(pos_, end - pos_));
    Token token;
    token.type = TokenType::kInteger;
    token.text = source_.substr(pos_, end - pos_);
    token.integer = value;
    token.line = line_;
    tokens_.push_back(std::move(token));
    pos_ = end;
  }

  bool lex_name() {
    if (!is_name_start(source_[pos_])) return false;
    size_t end = pos_;
    while (end < source_.size() && is_name_char(source_[end])) ++end;
    push(TokenType::kName, source_.substr(pos_, end - pos_));
    pos_ = end;
    return true;
  }

  bool lex_string() {
    char quote = source_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t i = pos_ + 1;
    while (i < source_.size() && source_[i] != quote) i += source_[i] == '\\' ? 2 : 1;
    if (i >= source_.size()) raise_error_at(line_, "unterminated string literal");
    std::string_view body = std::string_view(source_).substr(pos_ + 1, i - pos_ - 1);
    push(TokenType::kString, unescape_string(body, line_));
    line_ += count_newlines(body);
    pos_ = i + 1;
    return true;
  }

  void lex_operator(std::vector<char>& open_brackets) {
    static constexpr std::string_view kTwoCharacter[] = {"//", "**", "==", "!=", ">=", "<="};
    std::string_view rest = std::string_view(source_).substr(pos_);
    for (std::string_view op : kTwoCharacter) {
      if (rest.substr(0, 2) == op) {
        push(TokenType::kOperator, std::string(op));
        pos_ += 2;
        return;
      }
    }
    char c = source_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      raise_error_at(line_, "unexpected character '{}' in tag", pystr::encode(pystr::decode(rest).substr(0, 1)));
    }
    if (c == '(' || c == '[' || c == '{') {
      open_brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (open_brackets.empty()) raise_error_at(line_, "unexpected '{}'", c);
      if (open_brackets.back() != c) raise_error_at(line_, "unexpected '{}', expected '{}'", c, open_brackets.back());
      open_brackets.pop_back();
    }
    push(TokenType::kOperator, std::string(1, c));
    ++pos_;
  }

  std::string source_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the previous match ended with a newline (or this is the start)
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace tq::jinja
