// What rendering does with values: the evaluator that executes a parsed template, and the Python
// and jinja2 semantics it calls on values (member access, operators, built-in filters, tests and
// global functions).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace tq::jinja {

// Renders the template with the context's variables (and the global functions) as the
// outermost scope, where template-level {% set %} writes. Throws TemplateError carrying the line
// of the innermost node involved.
// Scoping follows jinja2: each for-loop iteration, macro call and block body ({% filter %},
// {% set %}...{% endset %}, {% with %}, {% call %}) gets its own scope, while {% if %} does not,
// so `set` inside a loop is invisible after it (use namespace()).
std::string render_template(const TemplateAst& ast, const Dict& context);

// Member access as jinja2's ImmutableSandboxedEnvironment does it: `obj.name` tries Python
// attributes (bound methods of str, dict and list) before items, `obj[key]` the reverse; misses
// give Undefined rather than errors; methods that would mutate a value, and dunder attributes,
// are "unsafe" and raise when used.
Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
// object[start:stop:step]; each bound is None/absent or an int (anything else gives Undefined).
Value get_slice(const Value& object, const std::optional<Value>& start, const std::optional<Value>& stop,
                const std::optional<Value>& step);

// Python's arithmetic operators on Jinja values (int overflow is an error instead of a bignum).
Value add(const Value& left, const Value& right);              // +  (numbers, str, list, tuple)
Value subtract(const Value& left, const Value& right);         // -
Value multiply(const Value& left, const Value& right);         // *  (also str/list repetition)
Value true_divide(const Value& left, const Value& right);      // /  (always float)
Value floor_divide(const Value& left, const Value& right);     // //
Value modulo(const Value& left, const Value& right);           // %  (also printf-style str % args)
Value power(const Value& left, const Value& right);            // **
Value negate(const Value& operand);                            // unary -
Value unary_plus(const Value& operand);                        // unary +

// Python's printf-style `format % args`: args is a tuple of positional values, a dict for
// %(name)s keys, or a single value.
std::string percent_format(const std::string& format, const Value& args);

// jinja2's built-in filters, tests and global functions, plus the globals transformers adds
// (raise_exception, strftime_now) and its `tojson` filter.
// Names jinja2 knows. The parser rejects other names, as jinja2 does at compile time; known
// names this interpreter does not implement fail when executed ("unsupported filter 'x'").
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Value apply_filter(std::string_view name, const Value& input, const CallArgs& args);
bool apply_test(std::string_view name, const Value& input, const CallArgs& args);

// range, dict, namespace, joiner, cycler, lipsum, raise_exception, strftime_now.
// strftime_now uses the current local time unless TQ_FIXED_DATE is set (see globals.cpp).
// Objects they create (namespace(), cycler()) live in `arena`, which must outlive the render.
Dict make_global_functions(ObjectArena& arena);

}  // namespace tq::jinja
