#include "jinja/runtime.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "jinja/pystr.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

void reject_undefined(const Value& left, const Value& right) {
  if (left.is_undefined()) raise_undefined(left);
  if (right.is_undefined()) raise_undefined(right);
}

[[noreturn]] void raise_unsupported(std::string_view op, const Value& left, const Value& right) {
  raise_error("TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(left),
              type_name(right));
}

void check_overflow(bool overflowed) {
  if (overflowed) raise_error("integer overflow: the result does not fit in 64 bits");
}

Value repeat(const Value& repeated, int64_t times) {
  int64_t unit = repeated.is_string() ? static_cast<int64_t>(repeated.as_string().size())
                                      : static_cast<int64_t>(repeated.items().size());
  int64_t limit = repeated.is_string() ? static_cast<int64_t>(kMaxStringBytes) : static_cast<int64_t>(kMaxSequenceItems);
  if (times > 0 && unit > 0 && times > limit / unit) {
    raise_error("MemoryError: repeating a {} of size {} {} times is too large", type_name(repeated), unit, times);
  }
  if (repeated.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += repeated.as_string();
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < times; ++i) {
    items.insert(items.end(), repeated.items().begin(), repeated.items().end());
  }
  return Value::sequence(std::move(items), repeated.as_sequence().style);
}

bool is_repeatable(const Value& value) {
  return value.is_string() ||
         (value.is_sequence() && (value.as_sequence().style == SequenceStyle::kList ||
                                  value.as_sequence().style == SequenceStyle::kTuple));
}

void check_divisor(const Value& divisor, std::string_view what) {
  if (divisor.as_double() == 0.0) raise_error("ZeroDivisionError: {}", what);
}

// Python's float divmod: the remainder takes the divisor's sign.
double python_float_mod(double left, double right) {
  double remainder = std::fmod(left, right);
  if (remainder != 0.0) {
    if ((right < 0) != (remainder < 0)) remainder += right;
  } else {
    remainder = std::copysign(0.0, right);
  }
  return remainder;
}

double python_float_floordiv(double left, double right) {
  double remainder = std::fmod(left, right);
  double quotient = (left - remainder) / right;
  if (remainder != 0.0 && ((right < 0) != (remainder < 0))) quotient -= 1.0;
  if (quotient == 0.0) return std::copysign(0.0, left / right);
  double floored = std::floor(quotient);
  if (quotient - floored > 0.5) floored += 1.0;
  return floored;
}

}  // namespace

Value add(const Value& left, const Value& right) {
  reject_undefined(left, right);
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return Value::floating(left.as_double() + right.as_double());
    int64_t sum;
    check_overflow(__builtin_add_overflow(left.as_int(), right.as_int(), &sum));
    return Value::integer(sum);
  }
  if (left.is_string()) {
    if (!right.is_string()) {
      raise_error("TypeError: can only concatenate str (not \"{}\") to str", type_name(right));
    }
    check_string_size(left.as_string().size() + right.as_string().size(), "the concatenated str");
    return Value::string(left.as_string() + right.as_string());
  }
  if (left.is_sequence() && right.is_sequence() && is_repeatable(left) &&
      left.as_sequence().style == right.as_sequence().style) {
    check_sequence_size(left.items().size() + right.items().size(), "the concatenated sequence");
    std::vector<Value> items = left.items();
    items.insert(items.end(), right.items().begin(), right.items().end());
    return Value::sequence(std::move(items), left.as_sequence().style);
  }
  raise_unsupported("+", left, right);
}

Value subtract(const Value& left, const Value& right) {
  reject_undefined(left, right);
  if (!left.is_number() || !right.is_number()) raise_unsupported("-", left, right);
  if (left.is_float() || right.is_float()) return Value::floating(left.as_double() - right.as_double());
  int64_t difference;
  check_overflow(__builtin_sub_overflow(left.as_int(), right.as_int(), &difference));
  return Value::integer(difference);
}

Value multiply(const Value& left, const Value& right) {
  reject_undefined(left, right);
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return Value::floating(left.as_double() * right.as_double());
    int64_t product;
    check_overflow(__builtin_mul_overflow(left.as_int(), right.as_int(), &product));
    return Value::integer(product);
  }
  if (is_repeatable(left) && right.is_integral()) return repeat(left, right.as_int());
  if (left.is_integral() && is_repeatable(right)) return repeat(right, left.as_int());
  raise_unsupported("*", left, right);
}

Value true_divide(const Value& left, const Value& right) {
  reject_undefined(left, right);
  if (!left.is_number() || !right.is_number()) raise_unsupported("/", left, right);
  check_divisor(right, "division by zero");
  return Value::floating(left.as_double() / right.as_double());
}

Value floor_divide(const Value& left, const Value& right) {
  reject_undefined(left, right);
  if (!left.is_number() || !right.is_number()) raise_unsupported("//", left, right);
  if (left.is_float() || right.is_float()) {
    check_divisor(right, "float floor division by zero");
    return Value::floating(python_float_floordiv(left.as_double(), right.as_double()));
  }
  check_divisor(right, "integer division or modulo by zero");
  int64_t a = left.as_int(), b = right.as_int();
  if (a == std::numeric_limits<int64_t>::min() && b == -1) check_overflow(true);
  int64_t quotient = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --quotient;
  return Value::integer(quotient);
}

Value modulo(const Value& left, const Value& right) {
  // str % x formats without touching x's operators, so an Undefined argument is fine here.
  if (left.is_string()) return Value::string(percent_format(left.as_string(), right));
  reject_undefined(left, right);
  if (!left.is_number() || !right.is_number()) raise_unsupported("%", left, right);
  if (left.is_float() || right.is_float()) {
    check_divisor(right, "float modulo");
    return Value::floating(python_float_mod(left.as_double(), right.as_double()));
  }
  check_divisor(right, "integer division or modulo by zero");
  int64_t a = left.as_int(), b = right.as_int();
  if (b == -1) return Value::integer(0);
  int64_t remainder = a % b;
  if (remainder != 0 && ((remainder < 0) != (b < 0))) remainder += b;
  return Value::integer(remainder);
}

Value power(const Value& left, const Value& right) {
  reject_undefined(left, right);
  if (!left.is_number() || !right.is_number()) raise_unsupported("** or pow()", left, right);
  if (left.is_integral() && right.is_integral() && right.as_int() >= 0) {
    int64_t base = left.as_int(), exponent = right.as_int(), result = 1;
    while (exponent > 0) {
      if (exponent & 1) check_overflow(__builtin_mul_overflow(result, base, &result));
      exponent >>= 1;
      if (exponent > 0) check_overflow(__builtin_mul_overflow(base, base, &base));
    }
    return Value::integer(result);
  }
  double base = left.as_double(), exponent = right.as_double();
  if (base == 0.0 && exponent < 0) {
    raise_error("ZeroDivisionError: 0.0 cannot be raised to a negative power");
  }
  if (base < 0 && exponent != std::floor(exponent)) {
    raise_error("unsupported: raising a negative number to a fractional power gives a complex number");
  }
  return Value::floating(std::pow(base, exponent));
}

Value negate(const Value& operand) {
  if (operand.is_undefined()) raise_undefined(operand);
  if (operand.is_float()) return Value::floating(-operand.as_double());
  if (operand.is_integral()) {
    if (operand.as_int() == std::numeric_limits<int64_t>::min()) check_overflow(true);
    return Value::integer(-operand.as_int());
  }
  raise_error("TypeError: bad operand type for unary -: '{}'", type_name(operand));
}

Value unary_plus(const Value& operand) {
  if (operand.is_undefined()) raise_undefined(operand);
  if (operand.is_float()) return operand;
  if (operand.is_integral()) return Value::integer(operand.as_int());
  raise_error("TypeError: bad operand type for unary +: '{}'", type_name(operand));
}

namespace {

// Python accepts any width or precision up to the C int range ("width too big" past it) and then
// builds the string; a prompt never needs more than this many characters of padding or digits.
constexpr int kMaxFormatField = 1 << 20;

struct Conversion {
  std::string flags;
  std::optional<int> width;
  std::optional<int> precision;
  char type = 's';
};

std::string pad(std::string text, const Conversion& conversion) {
  size_t size = pystr::length(text);
  if (!conversion.width || size >= static_cast<size_t>(*conversion.width)) return text;
  std::string fill(static_cast<size_t>(*conversion.width) - size, ' ');
  bool left_align = conversion.flags.find('-') != std::string::npos;
  return left_align ? text + fill : fill + text;
}

std::string format_number(const Value& argument, const Conversion& conversion) {
  if (!argument.is_number()) {
    raise_error("TypeError: %{} format: a real number is required, not {}", conversion.type,
                type_name(argument));
  }
  std::string spec = "%" + conversion.flags;
  if (conversion.width) spec += std::to_string(*conversion.width);
  if (conversion.precision) spec += "." + std::to_string(*conversion.precision);
  // Width and precision are bounded by kMaxFormatField, so one measuring call sizes the buffer.
  auto c_format = [](const std::string& spec_with_type, auto value) {
    int size = std::snprintf(nullptr, 0, spec_with_type.c_str(), value);
    if (size < 0) raise_error("ValueError: printf-style format '{}' failed", spec_with_type);
    std::string text(static_cast<size_t>(size) + 1, '\0');
    std::snprintf(text.data(), text.size(), spec_with_type.c_str(), value);
    text.resize(static_cast<size_t>(size));
    return text;
  };
  switch (conversion.type) {
    case 'd':
    case 'i':
    case 'u': {
      double value = argument.as_double();
      long long integer = argument.is_float() ? static_cast<long long>(std::trunc(value))
                                              : static_cast<long long>(argument.as_int());
      return c_format(spec + "lld", integer);
    }
    case 'x':
    case 'X':
    case 'o': {
      if (argument.is_float()) {
        raise_error("TypeError: %{} format: an integer is required, not float", conversion.type);
      }
      // C prints negative numbers in two's complement; Python prints a sign and the magnitude.
      int64_t integer = argument.as_int();
      unsigned long long magnitude =
          integer < 0 ? 0ULL - static_cast<unsigned long long>(integer) : static_cast<unsigned long long>(integer);
      std::string digits = c_format(std::string("%ll") + conversion.type, magnitude);
      if (conversion.flags.find('#') != std::string::npos) {
        digits = (conversion.type == 'o' ? "0o" : conversion.type == 'x' ? "0x" : "0X") + digits;
      }
      if (integer < 0) digits = "-" + digits;
      return pad(digits, conversion);
    }
    default: {
      return c_format(spec + conversion.type, argument.as_double());
    }
  }
}

std::string format_one(const Value& argument, const Conversion& conversion) {
  if (argument.is_undefined() && conversion.type != 's') raise_undefined(argument);
  switch (conversion.type) {
    case 's':
    case 'r':
    case 'a': {
      std::string text = conversion.type == 's' ? to_str(argument) : to_repr(argument);
      if (conversion.precision) {
        std::u32string code_points = pystr::decode(text);
        if (code_points.size() > static_cast<size_t>(*conversion.precision)) {
          text = pystr::encode(code_points.substr(0, static_cast<size_t>(*conversion.precision)));
        }
      }
      return pad(text, conversion);
    }
    case 'd': case 'i': case 'u': case 'x': case 'X': case 'o':
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G':
      return format_number(argument, conversion);
    default:
      raise_error("unsupported: printf-style conversion '%{}'", conversion.type);
  }
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  bool is_tuple = args.is_sequence() && args.as_sequence().style == SequenceStyle::kTuple;
  std::vector<Value> positional = is_tuple ? args.items() : std::vector<Value>{args};
  size_t next_argument = 0;
  bool used_mapping = false;
  std::string out;
  size_t i = 0;
  while (i < format.size()) {
    char c = format[i++];
    if (c != '%') {
      out += c;
      continue;
    }
    if (i >= format.size()) raise_error("ValueError: incomplete format");
    std::optional<Value> keyed;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos) raise_error("ValueError: incomplete format key");
      if (!args.is_dict()) raise_error("TypeError: format requires a mapping");
      std::string key = format.substr(i + 1, close - i - 1);
      const Value* found = args.as_dict().find(key);
      if (found == nullptr) raise_error("KeyError: {}", pystr::repr(key));
      keyed = *found;
      used_mapping = true;
      i = close + 1;
    }
    Conversion conversion;
    while (i < format.size() && std::string_view("#0- +").find(format[i]) != std::string_view::npos) {
      conversion.flags += format[i++];
    }
    auto read_number = [&](std::string_view field) -> std::optional<int> {
      if (i < format.size() && format[i] == '*') raise_error("unsupported: '*' width in printf-style format");
      if (i >= format.size() || !std::isdigit(static_cast<unsigned char>(format[i]))) return std::nullopt;
      int64_t number = 0;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        number = number * 10 + (format[i++] - '0');
        if (number > std::numeric_limits<int>::max()) raise_error("ValueError: {} too big", field);
      }
      if (number > kMaxFormatField) {
        raise_error("MemoryError: a printf-style {} of {} is larger than {}", field, number, kMaxFormatField);
      }
      return static_cast<int>(number);
    };
    conversion.width = read_number("width");
    if (i < format.size() && format[i] == '.') {
      ++i;
      conversion.precision = read_number("precision").value_or(0);
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) raise_error("ValueError: incomplete format");
    conversion.type = format[i++];
    if (conversion.type == '%') {
      out += '%';
      continue;
    }
    if (keyed) {
      out += format_one(*keyed, conversion);
      continue;
    }
    if (next_argument >= positional.size()) {
      raise_error("TypeError: not enough arguments for format string");
    }
    out += format_one(positional[next_argument++], conversion);
  }
  // Like CPython, a single list or dict argument is never "not all converted".
  bool container_argument = !is_tuple && (args.is_dict() || args.is_sequence() || args.is_undefined());
  if (!used_mapping && !container_argument && next_argument < positional.size()) {
    raise_error("TypeError: not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace tq::jinja
