// From template text to a syntax tree, as jinja2 compiles a template: the lexer, the parser and
// the scoping pass the parser ends with.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/ast.h"

namespace tq::jinja {

// Splits a Jinja template into tokens the way jinja2's lexer does with HF's settings
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False): whitespace control
// (`{%-`, `-%}`, `{%+`, `+%}`), comments and {% raw %} are resolved here, so the parser only
// sees data, tags and expression tokens.
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

// Builds the syntax tree from tokens, following jinja2's grammar and operator precedence.
// Throws TemplateError (with line) on syntax errors, unknown filters/tests/tags, and tags this
// interpreter does not implement ({% extends %}, {% include %}, {% import %}, ...).
// The result has its frames' scoping resolved (resolve_scopes below).
TemplateAst parse_template(std::string_view source);

// jinja2 decides variable scoping when it compiles a template, and one consequence is visible
// in output: in each frame (the template, a for-loop body, a macro, a block body), a name whose
// first mention in that frame is an unconditional assignment starts out *undefined*, hiding an
// outer or context value of the same name, unless an enclosing frame mentions the name too.
// E.g. with a context variable `a`:
//   {% for i in [1] %}{{ a }}{% endfor %}{% set a = 'new' %}   renders "" (not a's value)
//   {{ a }}{% set a = 'new' %}                                  renders a's value
// This pass replays jinja2's symbol analysis (jinja2/idtracking.py) over our tree and records,
// per frame, the names to bind to undefined on entry; everything else behaves like a plain
// lookup through the enclosing scopes.
void resolve_scopes(TemplateAst& ast);

}  // namespace tq::jinja
