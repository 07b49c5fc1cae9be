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
#pragma once
#include "tokenizer/jinja_ast.h"

namespace tq::jinja {

void resolve_scopes(TemplateAst& ast);

}  // namespace tq::jinja
