// Member access and the Python methods of str, dict, list and tuple (see get_attribute in runtime.h).
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "jinja/args.h"
#include "jinja/pystr.h"
#include "jinja/runtime.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

// Every attribute a Python str has; the ones without an implementation below raise
// "unsupported" when called, so a template never silently gets Undefined for a real method.
constexpr std::array<std::string_view, 47> kStrMethods = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
    "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
    "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
    "title", "translate", "upper", "zfill"};
constexpr std::array<std::string_view, 6> kSafeDictMethods = {"copy", "fromkeys", "get", "items", "keys", "values"};
constexpr std::array<std::string_view, 5> kMutatingDictMethods = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::array<std::string_view, 3> kSafeListMethods = {"copy", "count", "index"};
constexpr std::array<std::string_view, 8> kMutatingListMethods = {"append", "clear", "extend", "insert",
                                                                   "pop", "remove", "reverse", "sort"};
constexpr std::array<std::string_view, 2> kTupleMethods = {"count", "index"};

template <size_t N>
bool contains_name(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value no_attribute(const Value& object, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_description(object), name));
}

Value no_element(const Value& object, const Value& key) {
  return Value::undefined(fmt::format("{} has no element {}", object_description(object), to_repr(key)));
}

Value unsafe_attribute(const Value& object, const std::string& name) {
  return Value::undefined(
      fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name, type_name(object)));
}

const std::string& require_string(const Value& value, std::string_view what) {
  if (!value.is_string()) raise_error("TypeError: {} must be str, not {}", what, type_name(value));
  return value.as_string();
}

// startswith/endswith accept one prefix or a tuple of prefixes.
bool matches_affix(const std::string& text, const Value& affixes, bool at_start, std::string_view method) {
  std::vector<Value> candidates = affixes.is_sequence() && affixes.as_sequence().style == SequenceStyle::kTuple
                                      ? affixes.items()
                                      : std::vector<Value>{affixes};
  for (const Value& candidate : candidates) {
    const std::string& affix = require_string(candidate, fmt::format("{} argument", method));
    if (affix.size() > text.size()) continue;
    if (at_start ? text.compare(0, affix.size(), affix) == 0
                 : text.compare(text.size() - affix.size(), affix.size(), affix) == 0) {
      return true;
    }
  }
  return false;
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& part : parts) items.push_back(Value::string(std::move(part)));
  return Value::list(std::move(items));
}

std::string justify(const std::string& text, int64_t width, const std::string& fill, std::string_view how) {
  if (pystr::length(fill) != 1) raise_error("TypeError: the fill character must be exactly one character long");
  auto size = static_cast<int64_t>(pystr::length(text));
  if (width <= size) return text;
  check_string_size(static_cast<size_t>(width), "the justified str");
  check_string_size(static_cast<size_t>(width) * fill.size(), "the justified str");
  int64_t padding = width - size;
  int64_t left = how == "rjust" ? padding : how == "ljust" ? 0 : padding / 2 + (padding & width & 1);
  auto repeat = [&](int64_t times) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += fill;
    return out;
  };
  return repeat(left) + text + repeat(padding - left);
}

Value call_str_method(const std::string& self, const std::string& method, const CallArgs& args) {
  auto strip_with = [&](pystr::StripSide side) {
    BoundArgs bound(method, args, {"chars"});
    return Value::string(pystr::strip(self, side, bound.get_optional_string(0)));
  };
  auto predicate = [&](bool (*test)(char32_t)) {
    BoundArgs bound(method, args, {});
    return Value::boolean(pystr::all_code_points(self, test));
  };
  if (method == "strip") return strip_with(pystr::StripSide::kBoth);
  if (method == "lstrip") return strip_with(pystr::StripSide::kLeft);
  if (method == "rstrip") return strip_with(pystr::StripSide::kRight);
  if (method == "startswith" || method == "endswith") {
    BoundArgs bound(method, args, {"prefix"}, 1);
    return Value::boolean(matches_affix(self, bound.get(0), method == "startswith", method));
  }
  if (method == "split" || method == "rsplit") {
    BoundArgs bound(method, args, {"sep", "maxsplit"});
    auto separator = bound.get_optional_string(0);
    int64_t max_split = bound.get_int(1, -1);
    return string_list(method == "split" ? pystr::split(self, separator, max_split)
                                         : pystr::rsplit(self, separator, max_split));
  }
  if (method == "splitlines") {
    BoundArgs bound(method, args, {"keepends"});
    return string_list(pystr::splitlines(self, bound.get_bool(0, false)));
  }
  if (method == "upper" || method == "lower" || method == "title" || method == "capitalize" ||
      method == "swapcase" || method == "casefold") {
    BoundArgs bound(method, args, {});
    if (method == "upper") return Value::string(pystr::upper(self));
    if (method == "title") return Value::string(pystr::title(self));
    if (method == "capitalize") return Value::string(pystr::capitalize(self));
    if (method == "swapcase") return Value::string(pystr::swapcase(self));
    std::string lowered = pystr::lower(self);
    if (method == "casefold") lowered = pystr::replace(lowered, "\u00DF", "ss", -1);
    return Value::string(std::move(lowered));
  }
  if (method == "replace") {
    BoundArgs bound(method, args, {"old", "new", "count"}, 2);
    return Value::string(pystr::replace(self, require_string(bound.get(0), "replace() argument 1"),
                                        require_string(bound.get(1), "replace() argument 2"), bound.get_int(2, -1)));
  }
  if (method == "find" || method == "rfind" || method == "index" || method == "rindex" || method == "count") {
    BoundArgs bound(method, args, {"sub"}, 1);
    const std::string& needle = require_string(bound.get(0), fmt::format("{}() argument", method));
    if (method == "count") return Value::integer(pystr::count(self, needle));
    bool from_end = method == "rfind" || method == "rindex";
    int64_t position = from_end ? pystr::rfind(self, needle) : pystr::find(self, needle);
    if (position < 0 && (method == "index" || method == "rindex")) raise_error("ValueError: substring not found");
    return Value::integer(position);
  }
  if (method == "join") {
    BoundArgs bound(method, args, {"iterable"}, 1);
    std::string out;
    std::vector<Value> items = iterate(bound.get(0));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        raise_error("TypeError: sequence item {}: expected str instance, {} found", i, type_name(items[i]));
      }
      if (i > 0) out += self;
      out += items[i].as_string();
    }
    return Value::string(std::move(out));
  }
  if (method == "removeprefix" || method == "removesuffix") {
    BoundArgs bound(method, args, {"affix"}, 1);
    const std::string& affix = require_string(bound.get(0), fmt::format("{}() argument", method));
    bool prefix = method == "removeprefix";
    if (!matches_affix(self, bound.get(0), prefix, method)) return Value::string(self);
    return Value::string(prefix ? self.substr(affix.size()) : self.substr(0, self.size() - affix.size()));
  }
  if (method == "partition" || method == "rpartition") {
    BoundArgs bound(method, args, {"sep"}, 1);
    const std::string& separator = require_string(bound.get(0), fmt::format("{}() argument", method));
    if (separator.empty()) raise_error("ValueError: empty separator");
    size_t found = method == "partition" ? self.find(separator) : self.rfind(separator);
    if (found == std::string::npos) {
      bool first = method == "partition";
      return Value::tuple({Value::string(first ? self : ""), Value::string(""), Value::string(first ? "" : self)});
    }
    return Value::tuple({Value::string(self.substr(0, found)), Value::string(separator),
                         Value::string(self.substr(found + separator.size()))});
  }
  if (method == "ljust" || method == "rjust" || method == "center") {
    BoundArgs bound(method, args, {"width", "fillchar"}, 1);
    std::string fill = bound.get_optional_string(1).value_or(" ");
    return Value::string(justify(self, bound.get_int(0, 0), fill, method));
  }
  if (method == "zfill") {
    BoundArgs bound(method, args, {"width"}, 1);
    int64_t width = bound.get_int(0, 0);
    auto size = static_cast<int64_t>(pystr::length(self));
    if (width <= size) return Value::string(self);
    check_string_size(static_cast<size_t>(width), "zfill's result");
    bool signed_text = !self.empty() && (self[0] == '-' || self[0] == '+');
    std::string zeros(static_cast<size_t>(width - size), '0');
    return Value::string(signed_text ? self.substr(0, 1) + zeros + self.substr(1) : zeros + self);
  }
  if (method == "isalnum") {
    return predicate([](char32_t c) { return pystr::is_alpha(c) || pystr::is_numeric(c); });
  }
  if (method == "isalpha") return predicate(pystr::is_alpha);
  if (method == "isdecimal") return predicate(pystr::is_decimal);
  if (method == "isdigit") return predicate(pystr::is_digit);
  if (method == "isnumeric") return predicate(pystr::is_numeric);
  if (method == "isspace") return predicate(pystr::is_whitespace);
  if (method == "isascii") {
    BoundArgs bound(method, args, {});
    return Value::boolean(std::all_of(self.begin(), self.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  }
  if (method == "islower" || method == "isupper") {
    BoundArgs bound(method, args, {});
    return Value::boolean(method == "islower" ? pystr::is_lower_text(self) : pystr::is_upper_text(self));
  }
  raise_error("unsupported: str.{}() is not implemented by this Jinja interpreter", method);
}

int64_t index_of(const std::vector<Value>& items, const Value& needle, std::string_view type) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (equals(items[i], needle)) return static_cast<int64_t>(i);
  }
  raise_error("ValueError: {} is not in {}", to_repr(needle), type);
}

Value call_sequence_method(const Value& self, const std::string& method, const CallArgs& args) {
  if (method == "copy") {
    BoundArgs bound(method, args, {});
    return self;
  }
  BoundArgs bound(method, args, {"value"}, 1);
  const auto& items = self.items();
  if (method == "count") {
    return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& item) { return equals(item, bound.get(0)); }));
  }
  return Value::integer(index_of(items, bound.get(0), type_name(self)));
}

Value call_dict_method(const Value& self, const std::string& method, const CallArgs& args) {
  const Dict& dict = self.as_dict();
  if (method == "get") {
    BoundArgs bound(method, args, {"key", "default"}, 1);
    const Value& key = bound.get(0);
    const Value* found = key.is_string() ? dict.find(key.as_string()) : nullptr;
    return found ? *found : bound.get_or(1, Value::none());
  }
  BoundArgs bound(method, args, {});
  if (method == "copy") return self;
  std::vector<Value> items;
  for (const auto& [key, value] : dict.entries()) {
    if (method == "items") {
      items.push_back(Value::tuple({Value::string(key), value}));
    } else if (method == "keys") {
      items.push_back(Value::string(key));
    } else if (method == "values") {
      items.push_back(value);
    } else {
      raise_error("unsupported: dict.{}() is not implemented by this Jinja interpreter", method);
    }
  }
  SequenceStyle style = method == "items"  ? SequenceStyle::kDictItems
                        : method == "keys" ? SequenceStyle::kDictKeys
                                           : SequenceStyle::kDictValues;
  return Value::sequence(std::move(items), style);
}

Value bound_method(const Value& self, const std::string& name,
                   Value (*call)(const Value&, const std::string&, const CallArgs&)) {
  return Value::function(fmt::format("{}.{}", type_name(self), name),
                         [self, name, call](const CallArgs& args) { return call(self, name, args); });
}

Value call_str_method_of(const Value& self, const std::string& method, const CallArgs& args) {
  return call_str_method(self.as_string(), method, args);
}

bool is_dunder(const std::string& name) {
  return name.size() > 4 && name.compare(0, 2, "__") == 0 && name.compare(name.size() - 2, 2, "__") == 0;
}

bool is_plain_sequence(const Value& value) {
  auto style = value.as_sequence().style;
  return style == SequenceStyle::kList || style == SequenceStyle::kTuple;
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) raise_undefined(object);
  if (is_dunder(name)) return unsafe_attribute(object, name);
  switch (object.kind()) {
    case Value::Kind::kString:
      if (contains_name(kStrMethods, name)) return bound_method(object, name, call_str_method_of);
      return no_attribute(object, name);
    case Value::Kind::kDict:
      if (contains_name(kMutatingDictMethods, name)) return unsafe_attribute(object, name);
      if (contains_name(kSafeDictMethods, name)) return bound_method(object, name, call_dict_method);
      if (const Value* found = object.as_dict().find(name)) return *found;
      return no_attribute(object, name);
    case Value::Kind::kSequence: {
      bool is_list = object.as_sequence().style == SequenceStyle::kList;
      if (is_list && contains_name(kMutatingListMethods, name)) return unsafe_attribute(object, name);
      bool safe = is_list ? contains_name(kSafeListMethods, name)
                          : object.as_sequence().style == SequenceStyle::kTuple && contains_name(kTupleMethods, name);
      if (safe) return bound_method(object, name, call_sequence_method);
      return no_attribute(object, name);
    }
    case Value::Kind::kObject:
      if (const Value* found = object.as_object().attributes.find(name)) return *found;
      return no_attribute(object, name);
    default:
      return no_attribute(object, name);
  }
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) raise_undefined(object);
  if (key.is_integral() && (object.is_string() || (object.is_sequence() && is_plain_sequence(object)))) {
    int64_t index = key.as_int();
    if (object.is_string()) {
      std::u32string code_points = pystr::decode(object.as_string());
      auto size = static_cast<int64_t>(code_points.size());
      if (index < 0) index += size;
      if (index < 0 || index >= size) return no_element(object, key);
      return Value::string(pystr::encode(std::u32string(1, code_points[static_cast<size_t>(index)])));
    }
    auto size = static_cast<int64_t>(object.items().size());
    if (index < 0) index += size;
    if (index < 0 || index >= size) return no_element(object, key);
    return object.items()[static_cast<size_t>(index)];
  }
  if (object.is_dict() && key.is_string()) {
    if (const Value* found = object.as_dict().find(key.as_string())) return *found;
  }
  // jinja2 falls back to the attribute for string keys: d['items'] is the method.
  if (key.is_string()) return get_attribute(object, key.as_string());
  return no_element(object, key);
}

Value get_slice(const Value& object, const std::optional<Value>& start, const std::optional<Value>& stop,
                const std::optional<Value>& step) {
  if (object.is_undefined()) raise_undefined(object);
  bool bounds_valid = true;
  auto bound = [&](const std::optional<Value>& value) -> std::optional<int64_t> {
    if (!value || value->is_none()) return std::nullopt;
    if (!value->is_integral()) {
      bounds_valid = false;
      return std::nullopt;
    }
    return value->as_int();
  };
  auto first = bound(start), last = bound(stop), stride = bound(step);
  if (!bounds_valid) return Value::undefined(fmt::format("{} has no element slice", object_description(object)));
  if (object.is_string()) {
    std::u32string code_points = pystr::decode(object.as_string());
    std::u32string selected;
    for (size_t position : slice_indices(code_points.size(), first, last, stride)) selected += code_points[position];
    return Value::string(pystr::encode(selected));
  }
  if (object.is_sequence() && is_plain_sequence(object)) {
    std::vector<Value> selected;
    for (size_t position : slice_indices(object.items().size(), first, last, stride)) {
      selected.push_back(object.items()[position]);
    }
    return Value::sequence(std::move(selected), object.as_sequence().style);
  }
  return Value::undefined(fmt::format("{} has no element slice", object_description(object)));
}

}  // namespace tq::jinja
