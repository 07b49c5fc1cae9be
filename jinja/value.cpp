#include "jinja/value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "jinja/pystr.h"
#include "jinja/template_error.h"

namespace tq::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& entry : entries_) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& entry : entries_) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

ObjectArena::~ObjectArena() {
  for (const auto& object : objects_) object->attributes = Dict();
}

std::shared_ptr<Object> ObjectArena::make(std::string type_name) {
  auto object = std::make_shared<Object>();
  object->type_name = std::move(type_name);
  objects_.push_back(object);
  return object;
}

Value Value::undefined(std::string error) {
  return Value(Data(std::in_place_type<Undefined>, Undefined{std::move(error)}));
}
Value Value::none() { return Value(Data(std::in_place_type<std::monostate>)); }
Value Value::boolean(bool value) { return Value(Data(std::in_place_type<bool>, value)); }
Value Value::integer(int64_t value) { return Value(Data(std::in_place_type<int64_t>, value)); }
Value Value::floating(double value) { return Value(Data(std::in_place_type<double>, value)); }
Value Value::string(std::string value) {
  return Value(Data(std::in_place_type<StringPtr>, std::make_shared<const std::string>(std::move(value))));
}
Value Value::sequence(std::vector<Value> items, SequenceStyle style) {
  auto sequence = std::make_shared<Sequence>(Sequence{std::move(items), style});
  return Value(Data(std::in_place_type<SequencePtr>, std::move(sequence)));
}
Value Value::dict(Dict dict) {
  return Value(Data(std::in_place_type<DictPtr>, std::make_shared<Dict>(std::move(dict))));
}
Value Value::object(std::shared_ptr<Object> object) {
  return Value(Data(std::in_place_type<ObjectPtr>, std::move(object)));
}
Value Value::function(std::string name, NativeFunction call) {
  auto function = std::make_shared<Function>(Function{std::move(name), std::move(call)});
  return Value(Data(std::in_place_type<FunctionPtr>, std::move(function)));
}

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const void* Value::identity() const {
  switch (kind()) {
    case Kind::kSequence: return std::get<SequencePtr>(data_).get();
    case Kind::kDict: return std::get<DictPtr>(data_).get();
    case Kind::kObject: return std::get<ObjectPtr>(data_).get();
    case Kind::kFunction: return std::get<FunctionPtr>(data_).get();
    default: return nullptr;
  }
}

void raise_undefined(const Value& undefined) { raise_error("{}", undefined.undefined_error()); }

std::string type_name(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kSequence:
      switch (value.as_sequence().style) {
        case SequenceStyle::kList: return "list";
        case SequenceStyle::kTuple: return "tuple";
        case SequenceStyle::kDictItems: return "dict_items";
        case SequenceStyle::kDictKeys: return "dict_keys";
        case SequenceStyle::kDictValues: return "dict_values";
      }
      return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kObject: return value.as_object().type_name;
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

std::string object_description(const Value& value) {
  if (value.is_none()) return "None";
  return type_name(value) + " object";
}

bool truthy(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return value.as_bool();
    case Value::Kind::kInt: return value.as_int() != 0;
    case Value::Kind::kFloat: return value.as_double() != 0.0;
    case Value::Kind::kString: return !value.as_string().empty();
    case Value::Kind::kSequence: return !value.items().empty();
    case Value::Kind::kDict: return !value.as_dict().empty();
    case Value::Kind::kObject:
    case Value::Kind::kFunction: return true;
  }
  return false;
}

std::string format_int(int64_t value) { return fmt::format("{}", value); }

std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // Shortest round-trip digits, then Python's layout: positional for exponents -5 < e < 16,
  // otherwise d.ddde+XX; positional always shows a fractional part ("1.0").
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  bool negative = scientific[0] == '-';
  if (negative) scientific.erase(0, 1);
  size_t e_pos = scientific.find('e');
  std::string digits = scientific.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = std::stoi(scientific.substr(e_pos + 1));
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      size_t integer_digits = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= integer_digits) {
        out += digits + std::string(integer_digits - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
      }
    } else {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

namespace {

std::string join_reprs(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += to_repr(items[i]);
  }
  return out;
}

std::string dict_repr(const Dict& dict) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, item] : dict.entries()) {
    if (!first) out += ", ";
    first = false;
    out += pystr::repr(key) + ": " + to_repr(item);
  }
  return out + "}";
}

std::string object_str(const Object& object) {
  if (object.type_name == "LoopContext") {
    const Value* index = object.attributes.find("index");
    const Value* size = object.attributes.find("length");
    return fmt::format("<LoopContext {}/{}>", index ? to_str(*index) : "?", size ? to_str(*size) : "?");
  }
  // A namespace can contain itself; like Python's repr, print the inner occurrence as {...}.
  thread_local std::vector<const Object*> being_printed;
  if (std::find(being_printed.begin(), being_printed.end(), &object) != being_printed.end()) {
    return fmt::format("<{} {{...}}>", object.type_name);
  }
  being_printed.push_back(&object);
  struct PopOnExit {
    ~PopOnExit() { being_printed.pop_back(); }
  } pop_on_exit;
  return fmt::format("<{} {}>", object.type_name, dict_repr(object.attributes));
}

}  // namespace

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return format_int(value.as_int());
    case Value::Kind::kFloat: return format_float(value.as_double());
    case Value::Kind::kString: return value.as_string();
    case Value::Kind::kObject: return object_str(value.as_object());
    case Value::Kind::kFunction: return fmt::format("<function {}>", value.as_function().name);
    case Value::Kind::kSequence:
    case Value::Kind::kDict: return to_repr(value);
  }
  return "";
}

std::string to_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kString: return pystr::repr(value.as_string());
    case Value::Kind::kDict: return dict_repr(value.as_dict());
    case Value::Kind::kSequence: {
      const Sequence& sequence = value.as_sequence();
      std::string items = join_reprs(sequence.items);
      switch (sequence.style) {
        case SequenceStyle::kList: return "[" + items + "]";
        case SequenceStyle::kTuple: return "(" + items + (sequence.items.size() == 1 ? ",)" : ")");
        case SequenceStyle::kDictItems: return "dict_items([" + items + "])";
        case SequenceStyle::kDictKeys: return "dict_keys([" + items + "])";
        case SequenceStyle::kDictValues: return "dict_values([" + items + "])";
      }
      return "[" + items + "]";
    }
    default: return to_str(value);
  }
}

bool equals(const Value& left, const Value& right) {
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return left.as_double() == right.as_double();
    return left.as_int() == right.as_int();
  }
  if (left.kind() != right.kind()) return false;
  switch (left.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return left.as_string() == right.as_string();
    case Value::Kind::kSequence: {
      const Sequence& a = left.as_sequence();
      const Sequence& b = right.as_sequence();
      if (a.style != b.style || a.items.size() != b.items.size()) return false;
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (!equals(a.items[i], b.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& a = left.as_dict();
      const Dict& b = right.as_dict();
      if (a.size() != b.size()) return false;
      for (const auto& [key, item] : a.entries()) {
        const Value* other = b.find(key);
        if (other == nullptr || !equals(item, *other)) return false;
      }
      return true;
    }
    default: return left.identity() == right.identity();
  }
}

bool less_than(const Value& left, const Value& right, std::string_view op) {
  if (left.is_undefined()) raise_undefined(left);
  if (right.is_undefined()) raise_undefined(right);
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) return left.as_double() < right.as_double();
    return left.as_int() < right.as_int();
  }
  if (left.is_string() && right.is_string()) {
    // UTF-8 byte order is code point order, which is how Python orders str.
    return left.as_string() < right.as_string();
  }
  if (left.is_sequence() && right.is_sequence() &&
      left.as_sequence().style == right.as_sequence().style) {
    const auto& a = left.items();
    const auto& b = right.items();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!equals(a[i], b[i])) return less_than(a[i], b[i], op);
    }
    return a.size() < b.size();
  }
  raise_error("TypeError: '{}' not supported between instances of '{}' and '{}'", op,
              type_name(left), type_name(right));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;  // Undefined iterates as empty
    case Value::Kind::kString:
      if (!item.is_string()) {
        raise_error("TypeError: 'in <string>' requires string as left operand, not {}",
                    type_name(item));
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kSequence:
      return std::any_of(container.items().begin(), container.items().end(),
                         [&](const Value& element) { return equals(element, item); });
    case Value::Kind::kDict:
      if (item.is_dict() || (item.is_sequence() && item.as_sequence().style == SequenceStyle::kList)) {
        raise_error("TypeError: unhashable type: '{}'", type_name(item));
      }
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      raise_error("TypeError: argument of type '{}' is not iterable", type_name(container));
  }
}

std::vector<Value> iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kSequence: return value.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& entry : value.as_dict().entries()) keys.push_back(Value::string(entry.first));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> characters;
      for (char32_t c : pystr::decode(value.as_string())) {
        characters.push_back(Value::string(pystr::encode(std::u32string(1, c))));
      }
      return characters;
    }
    default: raise_error("TypeError: '{}' object is not iterable", type_name(value));
  }
}

int64_t length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(pystr::length(value.as_string()));
    case Value::Kind::kSequence: return static_cast<int64_t>(value.items().size());
    case Value::Kind::kDict: return static_cast<int64_t>(value.as_dict().size());
    default: raise_error("TypeError: object of type '{}' has no len()", type_name(value));
  }
}

std::vector<size_t> slice_indices(size_t length, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, std::optional<int64_t> step) {
  int64_t size = static_cast<int64_t>(length);
  int64_t stride = step.value_or(1);
  if (stride == 0) raise_error("ValueError: slice step cannot be zero");
  // Clamp like PySlice_AdjustIndices: negative indices count from the end.
  auto clamp = [&](std::optional<int64_t> index, int64_t if_absent) {
    if (!index) return if_absent;
    int64_t i = *index;
    if (i < 0) {
      i += size;
      if (i < 0) i = stride < 0 ? -1 : 0;
    } else if (i >= size) {
      i = stride < 0 ? size - 1 : size;
    }
    return i;
  };
  int64_t first = clamp(start, stride < 0 ? size - 1 : 0);
  int64_t last = clamp(stop, stride < 0 ? -1 : size);
  std::vector<size_t> positions;
  for (int64_t i = first; stride > 0 ? i < last : i > last; i += stride) {
    positions.push_back(static_cast<size_t>(i));
  }
  return positions;
}

}  // namespace tq::jinja
