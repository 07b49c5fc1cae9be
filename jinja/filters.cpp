// jinja2's built-in filters (3.1 semantics) and transformers' tojson.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "jinja/args.h"
#include "jinja/json.h"
#include "jinja/pystr.h"
#include "jinja/runtime.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

using FilterFunction = Value (*)(const Value& input, const CallArgs& args);

// jinja2 filters that exist but are not implemented here; using one is an error, not a no-op.
constexpr std::string_view kUnimplementedFilters[] = {
    "filesizeformat", "groupby", "pprint", "random", "slice", "striptags", "urlencode", "urlize", "wordwrap", "xmlattr"};

// `attribute="a.b.0"` arguments: dotted paths whose digit parts index sequences (make_attrgetter).
Value lookup_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value current = item;
  for (const std::string& part : pystr::split(attribute.as_string(), std::string("."), -1)) {
    bool is_index = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    // An index too large for int64 is out of range anyway: strtoll saturates, with the same result.
    current = get_item(current, is_index ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
  }
  return current;
}

Value lower_if_string(const Value& value) {
  return value.is_string() ? Value::string(pystr::lower(value.as_string())) : value;
}

// The sort/unique/min/max key: the attribute (if any), lower-cased unless case_sensitive.
Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive) {
  Value key = attribute ? lookup_path(item, *attribute) : item;
  return case_sensitive ? key : lower_if_string(key);
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Python float(str): surrounding whitespace and underscores between digits are allowed.
std::optional<double> parse_python_float(const std::string& text) {
  std::string trimmed = pystr::strip(text, pystr::StripSide::kBoth, std::nullopt);
  std::string digits;
  for (size_t i = 0; i < trimmed.size(); ++i) {
    if (trimmed[i] == '_') {
      bool between_digits = i > 0 && i + 1 < trimmed.size() && std::isdigit(static_cast<unsigned char>(trimmed[i - 1])) &&
                            std::isdigit(static_cast<unsigned char>(trimmed[i + 1]));
      if (!between_digits) return std::nullopt;
      continue;
    }
    digits += trimmed[i];
  }
  if (digits.empty() || digits.find_first_of("xXpP") != std::string::npos) return std::nullopt;  // no C hex floats
  std::string lowered = pystr::lower(digits);
  std::string unsigned_part = lowered[0] == '+' || lowered[0] == '-' ? lowered.substr(1) : lowered;
  if (unsigned_part == "nan" || unsigned_part == "inf" || unsigned_part == "infinity") {
    double special = unsigned_part == "nan" ? NAN : INFINITY;
    return lowered[0] == '-' ? -special : special;
  }
  if (unsigned_part.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double value = std::strtod(digits.c_str(), &end);
  if (end != digits.c_str() + digits.size()) return std::nullopt;
  return value;
}

// Python int(str, base): whitespace, a sign, underscores and (matching) base prefixes allowed.
std::optional<int64_t> parse_python_int(const std::string& text, int64_t base) {
  std::string trimmed = pystr::strip(text, pystr::StripSide::kBoth, std::nullopt);
  bool negative = false;
  size_t i = 0;
  if (i < trimmed.size() && (trimmed[i] == '+' || trimmed[i] == '-')) negative = trimmed[i++] == '-';
  auto has_prefix = [&](char letter) {
    return i + 1 < trimmed.size() && trimmed[i] == '0' && (trimmed[i + 1] | 0x20) == letter;
  };
  if ((base == 16 || base == 0) && has_prefix('x')) {
    base = 16;
    i += 2;
  } else if ((base == 8 || base == 0) && has_prefix('o')) {
    base = 8;
    i += 2;
  } else if ((base == 2 || base == 0) && has_prefix('b')) {
    base = 2;
    i += 2;
  } else if (base == 0) {
    base = 10;
  }
  if (base < 2 || base > 36) raise_error("ValueError: int() base must be >= 2 and <= 36, or 0");
  std::string digits;
  for (; i < trimmed.size(); ++i) {
    if (trimmed[i] == '_' && !digits.empty() && i + 1 < trimmed.size() && trimmed[i + 1] != '_') continue;
    if (!std::isalnum(static_cast<unsigned char>(trimmed[i]))) return std::nullopt;
    digits += trimmed[i];
  }
  if (digits.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
  if (end != digits.c_str() + digits.size()) return std::nullopt;
  if (errno == ERANGE) raise_error("unsupported: integer '{}' does not fit in 64 bits", text);
  return negative ? -value : value;
}

std::optional<Value> to_float(const Value& value) {
  if (value.is_number()) return Value::floating(value.as_double());
  if (value.is_string()) {
    if (auto parsed = parse_python_float(value.as_string())) return Value::floating(*parsed);
  }
  return std::nullopt;
}

// Python round(x, ndigits): correctly rounded, ties to even (printf rounds the exact binary value
// the same way).
double round_half_even(double value, int64_t digits) {
  if (!std::isfinite(value)) return value;
  if (digits < 0) {
    double scale = std::pow(10.0, static_cast<double>(-digits));
    return std::nearbyint(value / scale) * scale;
  }
  char buffer[512];
  std::snprintf(buffer, sizeof(buffer), "%.*f", static_cast<int>(std::min<int64_t>(digits, 300)), value);
  return std::strtod(buffer, nullptr);
}

Value filter_abs(const Value& input, const CallArgs& args) {
  BoundArgs bound("abs", args, {});
  if (input.is_float()) return Value::floating(std::fabs(input.as_double()));
  if (input.is_integral()) return input.as_int() < 0 ? negate(input) : Value::integer(input.as_int());
  raise_error("TypeError: bad operand type for abs(): '{}'", type_name(input));
}

Value filter_attr(const Value& input, const CallArgs& args) {
  BoundArgs bound("attr", args, {"name"}, 1);
  const Value& name = bound.get(0);
  auto missing = [&] {
    return Value::undefined(fmt::format("'{}' has no attribute {}", object_description(input), to_repr(name)));
  };
  if (!name.is_string()) return missing();
  // Unlike obj.name, attr() never falls back to items: a dict's keys are not attributes, only
  // its methods are (an empty dict has exactly those).
  if (input.is_dict() && get_attribute(Value::dict(Dict()), name.as_string()).is_undefined()) return missing();
  return get_attribute(input, name.as_string());
}

Value filter_batch(const Value& input, const CallArgs& args) {
  BoundArgs bound("batch", args, {"linecount", "fill_with"}, 1);
  int64_t size = bound.get_int(0, 1);
  if (size <= 0) raise_error("ValueError: batch() linecount must be positive");
  std::optional<Value> fill = bound.get_optional(1);
  std::vector<Value> batches, current;
  for (Value& item : iterate(input)) {
    current.push_back(std::move(item));
    if (static_cast<int64_t>(current.size()) == size) batches.push_back(Value::list(std::exchange(current, {})));
  }
  if (!current.empty()) {
    while (fill && static_cast<int64_t>(current.size()) < size) current.push_back(*fill);
    batches.push_back(Value::list(std::move(current)));
  }
  return Value::list(std::move(batches));
}

Value filter_center(const Value& input, const CallArgs& args) {
  BoundArgs bound("center", args, {"width"});
  CallArgs method_args{{Value::integer(bound.get_int(0, 80))}, {}};
  return get_attribute(Value::string(to_str(input)), "center").as_function().call(method_args);
}

Value filter_default(const Value& input, const CallArgs& args) {
  BoundArgs bound("default", args, {"default_value", "boolean"});
  bool use_default = input.is_undefined() || (bound.get_bool(1, false) && !truthy(input));
  return use_default ? bound.get_or(0, Value::string("")) : input;
}

Value filter_dictsort(const Value& input, const CallArgs& args) {
  BoundArgs bound("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!input.is_dict()) raise_error("TypeError: dictsort() expects a mapping, got {}", type_name(input));
  bool case_sensitive = bound.get_bool(0, false);
  std::string by = bound.get_optional_string(1).value_or("key");
  if (by != "key" && by != "value") raise_error("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  bool reverse = bound.get_bool(2, false);
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.as_dict().entries()) pairs.push_back(Value::tuple({Value::string(key), value}));
  size_t position = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    Value left = a.items()[position], right = b.items()[position];
    if (!case_sensitive) left = lower_if_string(left), right = lower_if_string(right);
    return reverse ? less_than(right, left, "<") : less_than(left, right, "<");
  });
  return Value::list(std::move(pairs));
}

Value filter_escape(const Value& input, const CallArgs& args) {
  BoundArgs bound("escape", args, {});
  return Value::string(html_escape(to_str(input)));
}

Value filter_first(const Value& input, const CallArgs& args) {
  BoundArgs bound("first", args, {});
  std::vector<Value> items = iterate(input);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value filter_last(const Value& input, const CallArgs& args) {
  BoundArgs bound("last", args, {});
  std::vector<Value> items = iterate(input);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value filter_float(const Value& input, const CallArgs& args) {
  BoundArgs bound("float", args, {"default"});
  if (input.is_undefined()) raise_undefined(input);  // float(Undefined) raises in jinja2
  return to_float(input).value_or(bound.get_or(0, Value::floating(0.0)));
}

Value filter_int(const Value& input, const CallArgs& args) {
  BoundArgs bound("int", args, {"default", "base"});
  if (input.is_undefined()) raise_undefined(input);  // int(Undefined) raises in jinja2
  Value fallback = bound.get_or(0, Value::integer(0));
  if (input.is_string()) {
    if (auto parsed = parse_python_int(input.as_string(), bound.get_int(1, 10))) return Value::integer(*parsed);
  } else if (input.is_integral()) {
    return Value::integer(input.as_int());
  }
  // jinja2 retries through float: "4.5" -> 4.
  auto as_float = to_float(input);
  if (!as_float || !std::isfinite(as_float->as_double())) return fallback;
  if (std::fabs(as_float->as_double()) >= 9.2e18) {
    raise_error("unsupported: integer {} does not fit in 64 bits", to_str(*as_float));
  }
  return Value::integer(static_cast<int64_t>(std::trunc(as_float->as_double())));
}

Value filter_format(const Value& input, const CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    raise_error("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  }
  if (!args.keyword.empty()) {
    Dict mapping;
    for (const auto& [name, value] : args.keyword) mapping.set(name, value);
    return Value::string(percent_format(to_str(input), Value::dict(std::move(mapping))));
  }
  return Value::string(percent_format(to_str(input), Value::tuple(args.positional)));
}

Value filter_indent(const Value& input, const CallArgs& args) {
  BoundArgs bound("indent", args, {"width", "first", "blank"});
  Value width = bound.get_or(0, Value::integer(4));
  std::string indentation;
  if (width.is_string()) {
    indentation = width.as_string();
  } else {
    auto spaces = static_cast<size_t>(std::max<int64_t>(0, width.as_int()));
    check_string_size(spaces, "indent's width");
    indentation.assign(spaces, ' ');
  }
  bool first = bound.get_bool(1, false), blank = bound.get_bool(2, false);
  // jinja2 does `s += "\n"` without converting s, so only strings can be indented.
  if (input.is_undefined()) raise_undefined(input);
  if (!input.is_string()) raise_error("TypeError: unsupported operand type(s) for +=: '{}' and 'str'", type_name(input));
  // The appended newline makes splitlines() keep a trailing empty line.
  std::vector<std::string> lines = pystr::splitlines(input.as_string() + "\n", false);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += "\n";
      if (blank || !lines[i].empty()) {
        check_string_size(out.size() + indentation.size() + lines[i].size(), "indent's result");
        out += indentation;
      }
    }
    out += lines[i];
  }
  return Value::string(first ? indentation + out : out);
}

Value filter_items(const Value& input, const CallArgs& args) {
  BoundArgs bound("items", args, {});
  if (input.is_undefined()) return Value::list({});
  if (!input.is_dict()) raise_error("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.as_dict().entries()) pairs.push_back(Value::tuple({Value::string(key), value}));
  return Value::list(std::move(pairs));
}

// join's result is bounded (kMaxStringBytes): each join of a string by a separator multiplies its
// length, so a chain of joins in a template would otherwise grow memory exponentially.
Value filter_join(const Value& input, const CallArgs& args) {
  BoundArgs bound("join", args, {"d", "attribute"});
  std::string separator = to_str(bound.get_or(0, Value::string("")));
  std::optional<Value> attribute = bound.get_optional(1);
  std::string out;
  bool first = true;
  auto append = [&](const std::string& piece) {
    check_string_size(out.size() + separator.size() + piece.size(), "join's result");
    if (!first) out += separator;
    first = false;
    out += piece;
  };
  if (input.is_string() && !attribute) {  // its characters, without a Value per character
    for (char32_t c : pystr::decode(input.as_string())) append(pystr::encode(std::u32string(1, c)));
  } else {
    for (const Value& item : iterate(input)) append(to_str(attribute ? lookup_path(item, *attribute) : item));
  }
  return Value::string(std::move(out));
}

Value filter_length(const Value& input, const CallArgs& args) {
  BoundArgs bound("length", args, {});
  return Value::integer(length(input));
}

Value filter_list(const Value& input, const CallArgs& args) {
  BoundArgs bound("list", args, {});
  return Value::list(iterate(input));
}

Value filter_lower(const Value& input, const CallArgs& args) {
  BoundArgs bound("lower", args, {});
  return Value::string(pystr::lower(to_str(input)));
}

Value filter_upper(const Value& input, const CallArgs& args) {
  BoundArgs bound("upper", args, {});
  return Value::string(pystr::upper(to_str(input)));
}

Value filter_capitalize(const Value& input, const CallArgs& args) {
  BoundArgs bound("capitalize", args, {});
  return Value::string(pystr::capitalize(to_str(input)));
}

// jinja2's title is not str.title: words start after '-', whitespace or an opening bracket.
Value filter_title(const Value& input, const CallArgs& args) {
  BoundArgs bound("title", args, {});
  std::u32string text = pystr::decode(to_str(input));
  auto is_delimiter = [](char32_t c) {
    return c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<' || pystr::is_whitespace(c);
  };
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t end = i + 1;
    bool delimiter_run = is_delimiter(text[i]);
    while (end < text.size() && is_delimiter(text[end]) == delimiter_run) ++end;
    std::u32string_view piece = std::u32string_view(text).substr(i, end - i);
    out += pystr::upper(pystr::encode(piece.substr(0, 1))) + pystr::lower(pystr::encode(piece.substr(1)));
    i = end;
  }
  return Value::string(std::move(out));
}

Value filter_map(const Value& input, const CallArgs& args) {
  std::vector<Value> results;
  if (args.positional.empty()) {
    BoundArgs bound("map", args, {"attribute", "default"});
    const Value& attribute = bound.get(0);
    std::optional<Value> fallback = bound.get_optional(1);
    if (!truthy(input)) return Value::list({});
    for (const Value& item : iterate(input)) {
      Value mapped = lookup_path(item, attribute);
      results.push_back(fallback && mapped.is_undefined() ? *fallback : mapped);
    }
    return Value::list(std::move(results));
  }
  if (!args.positional[0].is_string()) raise_error("TypeError: map() filter name must be a string");
  std::string name = args.positional[0].as_string();
  if (!is_known_filter(name)) raise_error("no filter named '{}'", name);
  CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  if (!truthy(input)) return Value::list({});
  for (const Value& item : iterate(input)) results.push_back(apply_filter(name, item, rest));
  return Value::list(std::move(results));
}

// select/reject/selectattr/rejectattr: keep items whose (attribute) passes the test, or is
// truthy when no test is named.
Value select_items(const Value& input, const CallArgs& args, bool by_attribute, bool keep_matches,
                   std::string_view filter) {
  std::vector<Value> positional = args.positional;
  std::optional<Value> attribute;
  if (by_attribute) {
    if (positional.empty()) raise_error("TypeError: {}() missing required argument 'attr'", filter);
    attribute = positional.front();
    positional.erase(positional.begin());
  }
  std::optional<std::string> test;
  if (!positional.empty()) {
    if (!positional.front().is_string()) raise_error("TypeError: {}() test name must be a string", filter);
    test = positional.front().as_string();
    if (!is_known_test(*test)) raise_error("no test named '{}'", *test);
    positional.erase(positional.begin());
  }
  CallArgs test_args{positional, args.keyword};
  std::vector<Value> kept;
  if (!truthy(input)) return Value::list({});  // jinja2 skips falsy inputs without iterating
  for (const Value& item : iterate(input)) {
    Value subject = attribute ? lookup_path(item, *attribute) : item;
    bool passes = test ? apply_test(*test, subject, test_args) : truthy(subject);
    if (passes == keep_matches) kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

Value filter_select(const Value& input, const CallArgs& args) { return select_items(input, args, false, true, "select"); }
Value filter_reject(const Value& input, const CallArgs& args) { return select_items(input, args, false, false, "reject"); }
Value filter_selectattr(const Value& input, const CallArgs& args) {
  return select_items(input, args, true, true, "selectattr");
}
Value filter_rejectattr(const Value& input, const CallArgs& args) {
  return select_items(input, args, true, false, "rejectattr");
}

Value min_or_max(const Value& input, const CallArgs& args, bool want_max) {
  BoundArgs bound(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool case_sensitive = bound.get_bool(0, false);
  std::optional<Value> attribute = bound.get_optional(1);
  std::vector<Value> items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(items[i], attribute, case_sensitive);
    if (want_max ? less_than(best_key, key, "<") : less_than(key, best_key, "<")) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Value filter_max(const Value& input, const CallArgs& args) { return min_or_max(input, args, true); }
Value filter_min(const Value& input, const CallArgs& args) { return min_or_max(input, args, false); }

Value filter_replace(const Value& input, const CallArgs& args) {
  BoundArgs bound("replace", args, {"old", "new", "count"}, 2);
  return Value::string(pystr::replace(to_str(input), to_str(bound.get(0)), to_str(bound.get(1)), bound.get_int(2, -1)));
}

Value filter_reverse(const Value& input, const CallArgs& args) {
  BoundArgs bound("reverse", args, {});
  if (input.is_string()) {
    std::u32string text = pystr::decode(input.as_string());
    std::reverse(text.begin(), text.end());
    return Value::string(pystr::encode(text));
  }
  std::vector<Value> items = iterate(input);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value filter_round(const Value& input, const CallArgs& args) {
  BoundArgs bound("round", args, {"precision", "method"});
  int64_t precision = bound.get_int(0, 0);
  std::string method = bound.get_optional_string(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor") {
    raise_error("FilterArgumentError: method must be common, ceil or floor");
  }
  if (!input.is_number()) raise_error("TypeError: type {} doesn't define __round__ method", type_name(input));
  if (method == "common") {
    // round() of an int stays an int.
    if (input.is_integral()) {
      if (precision >= 0) return Value::integer(input.as_int());
      return Value::integer(static_cast<int64_t>(round_half_even(input.as_double(), precision)));
    }
    return Value::floating(round_half_even(input.as_double(), precision));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double scaled = input.as_double() * scale;
  return Value::floating((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value filter_safe(const Value& input, const CallArgs& args) {
  BoundArgs bound("safe", args, {});
  return input;  // autoescaping is off for chat templates, so Markup changes nothing
}

Value filter_sort(const Value& input, const CallArgs& args) {
  BoundArgs bound("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool reverse = bound.get_bool(0, false), case_sensitive = bound.get_bool(1, false);
  std::optional<Value> attribute = bound.get_optional(2);
  std::vector<Value> items = iterate(input);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    // attribute="a,b" sorts by several keys, compared as a list.
    std::vector<Value> keys;
    if (attribute && attribute->is_string()) {
      for (const std::string& part : pystr::split(attribute->as_string(), std::string(","), -1)) {
        keys.push_back(sort_key(item, Value::string(part), case_sensitive));
      }
    } else {
      keys.push_back(sort_key(item, attribute, case_sensitive));
    }
    keyed.emplace_back(Value::list(std::move(keys)), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first, "<") : less_than(a.first, b.first, "<");
  });
  std::vector<Value> sorted;
  for (auto& entry : keyed) sorted.push_back(std::move(entry.second));
  return Value::list(std::move(sorted));
}

Value filter_string(const Value& input, const CallArgs& args) {
  BoundArgs bound("string", args, {});
  return Value::string(to_str(input));
}

Value filter_sum(const Value& input, const CallArgs& args) {
  BoundArgs bound("sum", args, {"attribute", "start"});
  std::optional<Value> attribute = bound.get_optional(0);
  Value total = bound.get_or(1, Value::integer(0));
  for (const Value& item : iterate(input)) total = add(total, attribute ? lookup_path(item, *attribute) : item);
  return total;
}

Value filter_tojson(const Value& input, const CallArgs& args) {
  // transformers replaces jinja2's HTML-safe tojson with plain json.dumps and these options.
  BoundArgs bound("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = bound.get_bool(0, false);
  if (auto indent = bound.get_optional(1)) {
    options.indent = indent->is_string() ? indent->as_string()
                                         : std::string(static_cast<size_t>(std::max<int64_t>(0, bound.get_int(1, 0))), ' ');
  }
  if (auto separators = bound.get_optional(2)) {
    std::vector<Value> parts = iterate(*separators);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string()) {
      raise_error("ValueError: tojson separators must be a pair of strings");
    }
    options.item_separator = parts[0].as_string();
    options.key_separator = parts[1].as_string();
  }
  options.sort_keys = bound.get_bool(3, false);
  return Value::string(dump_json(input, options));
}

Value filter_trim(const Value& input, const CallArgs& args) {
  BoundArgs bound("trim", args, {"chars"});
  return Value::string(pystr::strip(to_str(input), pystr::StripSide::kBoth, bound.get_optional_string(0)));
}

Value filter_truncate(const Value& input, const CallArgs& args) {
  BoundArgs bound("truncate", args, {"length", "killwords", "end", "leeway"});
  int64_t max_length = bound.get_int(0, 255);
  bool kill_words = bound.get_bool(1, false);
  std::string end = bound.get_optional_string(2).value_or("...");
  int64_t leeway = bound.get_int(3, 5);
  auto end_length = static_cast<int64_t>(pystr::length(end));
  if (max_length < end_length) raise_error("AssertionError: expected length >= {}, got {}", end_length, max_length);
  if (leeway < 0) raise_error("AssertionError: expected leeway >= 0, got {}", leeway);
  // jinja2 takes len() of the value as is: short non-strings come back unchanged.
  if (!input.is_string()) {
    if (length(input) <= max_length + leeway) return input;
    raise_error("TypeError: truncate() can only shorten strings, not {}", type_name(input));
  }
  const std::string& text = input.as_string();
  std::u32string code_points = pystr::decode(text);
  if (static_cast<int64_t>(code_points.size()) <= max_length + leeway) return input;
  std::string kept = pystr::encode(code_points.substr(0, static_cast<size_t>(max_length - end_length)));
  if (!kill_words) kept = pystr::rsplit(kept, std::string(" "), 1).front();
  return Value::string(kept + end);
}

Value filter_unique(const Value& input, const CallArgs& args) {
  BoundArgs bound("unique", args, {"case_sensitive", "attribute"});
  bool case_sensitive = bound.get_bool(0, false);
  std::optional<Value> attribute = bound.get_optional(1);
  std::vector<Value> kept, seen;
  for (const Value& item : iterate(input)) {
    Value key = sort_key(item, attribute, case_sensitive);
    if (key.is_dict() || (key.is_sequence() && key.as_sequence().style == SequenceStyle::kList)) {
      raise_error("TypeError: unhashable type: '{}'", type_name(key));  // unique() uses a set
    }
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& other) { return equals(other, key); })) continue;
    seen.push_back(std::move(key));
    kept.push_back(item);
  }
  return Value::list(std::move(kept));
}

Value filter_wordcount(const Value& input, const CallArgs& args) {
  BoundArgs bound("wordcount", args, {});
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : pystr::decode(to_str(input))) {
    bool word_char = c == U'_' || pystr::is_alpha(c) || pystr::is_numeric(c);  // regex \w
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

const std::unordered_map<std::string_view, FilterFunction>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFunction> table = {
      {"abs", filter_abs},           {"attr", filter_attr},
      {"batch", filter_batch},       {"capitalize", filter_capitalize},
      {"center", filter_center},     {"count", filter_length},
      {"d", filter_default},         {"default", filter_default},
      {"dictsort", filter_dictsort}, {"e", filter_escape},
      {"escape", filter_escape},     {"first", filter_first},
      {"float", filter_float},       {"forceescape", filter_escape},
      {"format", filter_format},     {"indent", filter_indent},
      {"int", filter_int},           {"items", filter_items},
      {"join", filter_join},         {"last", filter_last},
      {"length", filter_length},     {"list", filter_list},
      {"lower", filter_lower},       {"map", filter_map},
      {"max", filter_max},           {"min", filter_min},
      {"reject", filter_reject},     {"rejectattr", filter_rejectattr},
      {"replace", filter_replace},   {"reverse", filter_reverse},
      {"round", filter_round},       {"safe", filter_safe},
      {"select", filter_select},     {"selectattr", filter_selectattr},
      {"sort", filter_sort},         {"string", filter_string},
      {"sum", filter_sum},           {"title", filter_title},
      {"tojson", filter_tojson},     {"trim", filter_trim},
      {"truncate", filter_truncate}, {"unique", filter_unique},
      {"upper", filter_upper},       {"wordcount", filter_wordcount},
  };
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filter_table().count(name) > 0 ||
         std::find(std::begin(kUnimplementedFilters), std::end(kUnimplementedFilters), name) !=
             std::end(kUnimplementedFilters);
}

Value apply_filter(std::string_view name, const Value& input, const CallArgs& args) {
  auto found = filter_table().find(name);
  if (found == filter_table().end()) {
    if (is_known_filter(name)) raise_error("unsupported filter '{}'", name);
    raise_error("no filter named '{}'", name);
  }
  return found->second(input, args);
}

}  // namespace tq::jinja
