// Splits a Jinja template into tokens the way jinja2's lexer does with HF's settings
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False): whitespace control
// (`{%-`, `-%}`, `{%+`, `+%}`), comments and {% raw %} are resolved here, so the parser only
// sees data, tags and expression tokens.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tq::jinja {

enum class TokenType {
  kData,           // template text, whitespace control already applied
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,         // text holds the unescaped value
  kInteger,
  kFloat,
  kOperator,       // text holds the operator, e.g. "//" or "("
  kEnd,
};

struct Token {
  TokenType type = TokenType::kEnd;
  std::string text;
  int64_t integer = 0;
  double floating = 0.0;
  int line = 1;
};

// Throws TemplateError (with line) on malformed input: unterminated tags, comments or strings,
// unbalanced brackets, characters that start no token.
std::vector<Token> tokenize(std::string_view source);

}  // namespace tq::jinja
