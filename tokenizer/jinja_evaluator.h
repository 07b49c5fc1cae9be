// Executes a parsed template. Scoping follows jinja2: each for-loop iteration, macro call and
// block body ({% filter %}, {% set %}...{% endset %}, {% with %}, {% call %}) gets its own
// scope, while {% if %} does not, so `set` inside a loop is invisible after it (use namespace()).
#pragma once
#include <string>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace tq::jinja {

// Renders the template with the context's variables (and the global functions) as the
// outermost scope, where template-level {% set %} writes. Throws TemplateError carrying the line
// of the innermost node involved.
std::string render_template(const TemplateAst& ast, const Dict& context);

}  // namespace tq::jinja
