// Builds the syntax tree from tokens, following jinja2's grammar and operator precedence.
#pragma once
#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace tq::jinja {

// Throws TemplateError (with line) on syntax errors, unknown filters/tests/tags, and tags this
// interpreter does not implement ({% extends %}, {% include %}, {% import %}, ...).
// The result has its frames' scoping resolved (resolve_scopes in jinja_scoping.h).
TemplateAst parse_template(std::string_view source);

}  // namespace tq::jinja
