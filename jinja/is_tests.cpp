// jinja2's built-in tests (`x is defined`, `x is divisibleby 3`, ...), 3.1 semantics.
#include <algorithm>
#include <unordered_map>

#include "jinja/args.h"
#include "jinja/pystr.h"
#include "jinja/runtime.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

using TestFunction = bool (*)(const Value& input, const CallArgs& args);

Value single_argument(std::string_view test, const CallArgs& args) {
  BoundArgs bound(test, args, {"other"}, 1);
  return bound.get(0);
}

bool no_arguments(std::string_view test, const CallArgs& args) {
  BoundArgs bound(test, args, {});
  return true;
}

bool test_defined(const Value& input, const CallArgs& args) { return no_arguments("defined", args) && !input.is_undefined(); }
bool test_undefined(const Value& input, const CallArgs& args) { return no_arguments("undefined", args) && input.is_undefined(); }
bool test_none(const Value& input, const CallArgs& args) { return no_arguments("none", args) && input.is_none(); }
bool test_boolean(const Value& input, const CallArgs& args) { return no_arguments("boolean", args) && input.is_bool(); }
bool test_true(const Value& input, const CallArgs& args) {
  return no_arguments("true", args) && input.is_bool() && input.as_bool();
}
bool test_false(const Value& input, const CallArgs& args) {
  return no_arguments("false", args) && input.is_bool() && !input.as_bool();
}
bool test_integer(const Value& input, const CallArgs& args) { return no_arguments("integer", args) && input.is_int(); }
bool test_float(const Value& input, const CallArgs& args) { return no_arguments("float", args) && input.is_float(); }
bool test_number(const Value& input, const CallArgs& args) { return no_arguments("number", args) && input.is_number(); }
bool test_string(const Value& input, const CallArgs& args) { return no_arguments("string", args) && input.is_string(); }
bool test_mapping(const Value& input, const CallArgs& args) { return no_arguments("mapping", args) && input.is_dict(); }
// jinja2's Undefined and loop objects define __call__ too.
bool test_callable(const Value& input, const CallArgs& args) {
  no_arguments("callable", args);
  return input.is_function() || input.is_undefined() ||
         (input.is_object() && input.as_object().type_name == "LoopContext");
}
bool test_escaped(const Value& input, const CallArgs& args) {
  no_arguments("escaped", args);
  return false;  // there are no Markup values: autoescaping is off
}

// Python sequences have len() and indexing: str, list, tuple, dict, and jinja2's Undefined.
bool test_sequence(const Value& input, const CallArgs& args) {
  no_arguments("sequence", args);
  if (input.is_sequence()) {
    auto style = input.as_sequence().style;
    return style == SequenceStyle::kList || style == SequenceStyle::kTuple;
  }
  return input.is_string() || input.is_dict() || input.is_undefined();
}

bool test_iterable(const Value& input, const CallArgs& args) {
  no_arguments("iterable", args);
  return input.is_string() || input.is_sequence() || input.is_dict() || input.is_undefined() ||
         (input.is_object() && input.as_object().type_name == "LoopContext");
}

bool test_lower(const Value& input, const CallArgs& args) {
  return no_arguments("lower", args) && pystr::is_lower_text(to_str(input));
}
bool test_upper(const Value& input, const CallArgs& args) {
  return no_arguments("upper", args) && pystr::is_upper_text(to_str(input));
}

bool test_odd(const Value& input, const CallArgs& args) {
  no_arguments("odd", args);
  return equals(modulo(input, Value::integer(2)), Value::integer(1));
}
bool test_even(const Value& input, const CallArgs& args) {
  no_arguments("even", args);
  return equals(modulo(input, Value::integer(2)), Value::integer(0));
}
bool test_divisibleby(const Value& input, const CallArgs& args) {
  BoundArgs bound("divisibleby", args, {"num"}, 1);
  return equals(modulo(input, bound.get(0)), Value::integer(0));
}

// Python `is`: value identity for None and bools, object identity for containers. Equal
// numbers and strings count as the same object, which CPython only guarantees when cached.
bool test_sameas(const Value& input, const CallArgs& args) {
  Value other = single_argument("sameas", args);
  if (input.kind() != other.kind()) return false;
  if (input.identity() != nullptr) return input.identity() == other.identity();
  return equals(input, other);
}

bool test_in(const Value& input, const CallArgs& args) {
  BoundArgs bound("in", args, {"seq"}, 1);
  return contains(bound.get(0), input);
}

bool test_eq(const Value& input, const CallArgs& args) { return equals(input, single_argument("eq", args)); }
bool test_ne(const Value& input, const CallArgs& args) { return !equals(input, single_argument("ne", args)); }
bool test_lt(const Value& input, const CallArgs& args) { return less_than(input, single_argument("lt", args), "<"); }
bool test_le(const Value& input, const CallArgs& args) {
  Value other = single_argument("le", args);
  return !less_than(other, input, "<=");
}
bool test_gt(const Value& input, const CallArgs& args) { return less_than(single_argument("gt", args), input, ">"); }
bool test_ge(const Value& input, const CallArgs& args) {
  Value other = single_argument("ge", args);
  return !less_than(input, other, ">=");
}

bool test_filter(const Value& input, const CallArgs& args) {
  return no_arguments("filter", args) && input.is_string() && is_known_filter(input.as_string());
}
bool test_test(const Value& input, const CallArgs& args) {
  return no_arguments("test", args) && input.is_string() && is_known_test(input.as_string());
}

const std::unordered_map<std::string_view, TestFunction>& test_table() {
  static const std::unordered_map<std::string_view, TestFunction> table = {
      {"defined", test_defined},   {"undefined", test_undefined}, {"none", test_none},
      {"boolean", test_boolean},   {"true", test_true},           {"false", test_false},
      {"integer", test_integer},   {"float", test_float},         {"number", test_number},
      {"string", test_string},     {"mapping", test_mapping},     {"sequence", test_sequence},
      {"iterable", test_iterable}, {"callable", test_callable},   {"escaped", test_escaped},
      {"lower", test_lower},       {"upper", test_upper},         {"odd", test_odd},
      {"even", test_even},         {"divisibleby", test_divisibleby}, {"sameas", test_sameas},
      {"in", test_in},             {"filter", test_filter},       {"test", test_test},
      {"eq", test_eq},             {"equalto", test_eq},          {"==", test_eq},
      {"ne", test_ne},             {"!=", test_ne},               {"lt", test_lt},
      {"lessthan", test_lt},       {"<", test_lt},                {"le", test_le},
      {"<=", test_le},             {"gt", test_gt},               {"greaterthan", test_gt},
      {">", test_gt},              {"ge", test_ge},               {">=", test_ge},
  };
  return table;
}

}  // namespace

bool is_known_test(std::string_view name) { return test_table().count(name) > 0; }

bool apply_test(std::string_view name, const Value& input, const CallArgs& args) {
  auto found = test_table().find(name);
  if (found == test_table().end()) raise_error("no test named '{}'", name);
  return found->second(input, args);
}

}  // namespace tq::jinja
