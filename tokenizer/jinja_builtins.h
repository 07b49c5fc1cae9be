// jinja2's built-in filters, tests and global functions, plus the globals transformers adds
// (raise_exception, strftime_now) and its `tojson` filter.
#pragma once
#include <string_view>

#include "tokenizer/jinja_value.h"

namespace tq::jinja {

// Names jinja2 knows. The parser rejects other names, as jinja2 does at compile time; known
// names this interpreter does not implement fail when executed ("unsupported filter 'x'").
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Value apply_filter(std::string_view name, const Value& input, const CallArgs& args);
bool apply_test(std::string_view name, const Value& input, const CallArgs& args);

// range, dict, namespace, joiner, cycler, lipsum, raise_exception, strftime_now.
// strftime_now uses the current local time unless TQ_FIXED_DATE is set (see jinja_globals.cpp).
// Objects they create (namespace(), cycler()) live in `arena`, which must outlive the render.
Dict make_global_functions(ObjectArena& arena);

}  // namespace tq::jinja
