#include "jinja/args.h"

#include <algorithm>

#include "jinja/template_error.h"

namespace tq::jinja {

BoundArgs::BoundArgs(std::string_view function, const CallArgs& args,
                     std::initializer_list<std::string_view> params, size_t required, bool accept_extra)
    : function_(function), names_(params), values_(params.size()) {
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < values_.size()) {
      values_[i] = args.positional[i];
    } else if (accept_extra) {
      extra_positional_.push_back(args.positional[i]);
    } else {
      raise_error("TypeError: {}() takes at most {} positional argument(s) ({} given)", function_,
                  values_.size(), args.positional.size());
    }
  }
  for (const auto& [name, value] : args.keyword) {
    auto found = std::find(names_.begin(), names_.end(), name);
    if (found == names_.end()) {
      if (!accept_extra) raise_error("TypeError: {}() got an unexpected keyword argument '{}'", function_, name);
      extra_keyword_.emplace_back(name, value);
      continue;
    }
    auto index = static_cast<size_t>(found - names_.begin());
    if (values_[index]) raise_error("TypeError: {}() got multiple values for argument '{}'", function_, name);
    values_[index] = value;
  }
  for (size_t i = 0; i < required; ++i) {
    if (!values_[i]) raise_error("TypeError: {}() missing required argument '{}'", function_, names_[i]);
  }
}

const Value& BoundArgs::get(size_t index) const {
  if (!values_[index]) raise_error("TypeError: {}() missing argument '{}'", function_, names_[index]);
  return *values_[index];
}

Value BoundArgs::get_or(size_t index, Value fallback) const {
  return values_[index] ? *values_[index] : std::move(fallback);
}

std::optional<Value> BoundArgs::get_optional(size_t index) const {
  if (!values_[index] || values_[index]->is_none()) return std::nullopt;
  return values_[index];
}

int64_t BoundArgs::get_int(size_t index, int64_t fallback) const {
  auto value = get_optional(index);
  if (!value) return fallback;
  if (!value->is_integral()) {
    raise_error("TypeError: {}() argument '{}' must be an integer, not {}", function_, names_[index],
                type_name(*value));
  }
  return value->as_int();
}

bool BoundArgs::get_bool(size_t index, bool fallback) const {
  return values_[index] ? truthy(*values_[index]) : fallback;
}

std::optional<std::string> BoundArgs::get_optional_string(size_t index) const {
  auto value = get_optional(index);
  if (!value) return std::nullopt;
  if (!value->is_string()) {
    raise_error("TypeError: {}() argument '{}' must be str, not {}", function_, names_[index], type_name(*value));
  }
  return value->as_string();
}

}  // namespace tq::jinja
