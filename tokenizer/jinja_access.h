// Member access as jinja2's ImmutableSandboxedEnvironment does it: `obj.name` tries Python
// attributes (bound methods of str, dict and list) before items, `obj[key]` the reverse; misses
// give Undefined rather than errors; methods that would mutate a value, and dunder attributes,
// are "unsafe" and raise when used.
#pragma once
#include <optional>
#include <string>

#include "tokenizer/jinja_value.h"

namespace tq::jinja {

Value get_attribute(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
// object[start:stop:step]; each bound is None/absent or an int (anything else gives Undefined).
Value get_slice(const Value& object, const std::optional<Value>& start, const std::optional<Value>& stop,
                const std::optional<Value>& step);

}  // namespace tq::jinja
