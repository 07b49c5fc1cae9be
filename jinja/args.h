// Binds call arguments to a Python-style parameter list for built-in filters, tests, methods
// and functions, with Python's TypeErrors for missing, unknown or duplicated arguments.
#pragma once
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "jinja/value.h"

namespace tq::jinja {

class BoundArgs {
 public:
  // `params` are bound in order from positional then keyword arguments; the first `required`
  // must be given. With accept_extra, surplus positional and unknown keyword arguments are kept
  // (for *args/**kwargs functions such as map() and namespace()) instead of rejected.
  BoundArgs(std::string_view function, const CallArgs& args, std::initializer_list<std::string_view> params,
            size_t required = 0, bool accept_extra = false);

  bool has(size_t index) const { return values_[index].has_value(); }
  const Value& get(size_t index) const;  // a required or given parameter
  Value get_or(size_t index, Value fallback) const;
  // An optional parameter where Python's default is None: absent or None both give nullopt.
  std::optional<Value> get_optional(size_t index) const;

  int64_t get_int(size_t index, int64_t fallback) const;
  bool get_bool(size_t index, bool fallback) const;  // truthiness, as Python flags behave
  std::optional<std::string> get_optional_string(size_t index) const;

  const std::vector<Value>& extra_positional() const { return extra_positional_; }
  const std::vector<std::pair<std::string, Value>>& extra_keyword() const { return extra_keyword_; }

 private:
  std::string function_;
  std::vector<std::string_view> names_;
  std::vector<std::optional<Value>> values_;
  std::vector<Value> extra_positional_;
  std::vector<std::pair<std::string, Value>> extra_keyword_;
};

}  // namespace tq::jinja
