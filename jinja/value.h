// Values of the Jinja interpreter and the Python semantics they follow (jinja2 runs on Python, so
// printing, truthiness, equality, ordering, `in`, len() and iteration are Python's).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tq::jinja {

class Value;

// Which Python type a sequence stands for; it decides how the sequence prints and compares:
// a tuple prints as (1, 2), dict.items() as dict_items([...]).
enum class SequenceStyle { kList, kTuple, kDictItems, kDictKeys, kDictValues };

struct Sequence {
  std::vector<Value> items;
  SequenceStyle style = SequenceStyle::kList;
};

// A Python dict with str keys: insertion-ordered, which matters for tojson and printing.
// Linear lookup: template dicts (messages, tool schemas) have a handful of keys.
class Dict {
 public:
  using Entry = std::pair<std::string, Value>;

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);  // replaces in place or appends, like d[key] = value
  const std::vector<Entry>& entries() const { return entries_; }
  // Defined after Value: vector<Entry>::size() needs the complete type (clang insists).
  size_t size() const;
  bool empty() const;

 private:
  std::vector<Entry> entries_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<Value(const CallArgs&)>;

struct Function {
  std::string name;
  NativeFunction call;
};

// Attribute-bag objects: namespace() (the one mutable value: {% set ns.attr = ... %}) and the
// loop variable. type_name is the Python class name used in printing and error messages.
struct Object {
  std::string type_name;
  Dict attributes;
};

// Owns the objects made during one render. Namespaces can reference each other, or themselves
// ({% set ns.me = ns %}), which reference counting alone would leak; when the render ends the
// arena clears every object's attributes, breaking such cycles.
class ObjectArena {
 public:
  ObjectArena() = default;
  ObjectArena(const ObjectArena&) = delete;
  ObjectArena& operator=(const ObjectArena&) = delete;
  ~ObjectArena();

  std::shared_ptr<Object> make(std::string type_name);

 private:
  std::vector<std::shared_ptr<Object>> objects_;
};

// jinja2's default Undefined: prints as "", is falsy and iterates as empty, but raises `error`
// when used in arithmetic, attribute access, calls and the like.
struct Undefined {
  std::string error;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kSequence, kDict, kObject, kFunction };

  Value() : data_(Undefined{"value is undefined"}) {}
  static Value undefined(std::string error);
  static Value none();
  static Value boolean(bool value);
  static Value integer(int64_t value);
  static Value floating(double value);
  static Value string(std::string value);
  static Value sequence(std::vector<Value> items, SequenceStyle style);
  static Value list(std::vector<Value> items) { return sequence(std::move(items), SequenceStyle::kList); }
  static Value tuple(std::vector<Value> items) { return sequence(std::move(items), SequenceStyle::kTuple); }
  static Value dict(Dict dict);
  static Value object(std::shared_ptr<Object> object);
  static Value function(std::string name, NativeFunction call);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // Python numbers: bool is an int subclass, so True + 1 == 2.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_integral() const { return is_bool() || is_int(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_sequence() const { return kind() == Kind::kSequence; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_object() const { return kind() == Kind::kObject; }
  bool is_function() const { return kind() == Kind::kFunction; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;    // int or bool
  double as_double() const;  // any number
  const std::string& as_string() const { return *std::get<StringPtr>(data_); }
  const Sequence& as_sequence() const { return *std::get<SequencePtr>(data_); }
  const std::vector<Value>& items() const { return as_sequence().items; }
  const Dict& as_dict() const { return *std::get<DictPtr>(data_); }
  Object& as_object() const { return *std::get<ObjectPtr>(data_); }
  const Function& as_function() const { return *std::get<FunctionPtr>(data_); }
  const std::string& undefined_error() const { return std::get<Undefined>(data_).error; }

  // Identity for the reference types (Python `is`), used by the `sameas` test.
  const void* identity() const;

 private:
  // Strings are immutable and shared, as in Python: passing message contents around is cheap.
  using StringPtr = std::shared_ptr<const std::string>;
  using SequencePtr = std::shared_ptr<const Sequence>;
  using DictPtr = std::shared_ptr<const Dict>;
  using ObjectPtr = std::shared_ptr<Object>;
  using FunctionPtr = std::shared_ptr<const Function>;
  using Data = std::variant<Undefined, std::monostate, bool, int64_t, double, StringPtr, SequencePtr,
                            DictPtr, ObjectPtr, FunctionPtr>;

  explicit Value(Data data) : data_(std::move(data)) {}

  Data data_;
};

inline size_t Dict::size() const { return entries_.size(); }
inline bool Dict::empty() const { return entries_.empty(); }

// Throws the error an undefined value carries (jinja2 raises it on use).
[[noreturn]] void raise_undefined(const Value& undefined);

std::string type_name(const Value& value);         // Python type(value).__name__
std::string object_description(const Value& value);  // "dict object", "None": jinja's error wording

bool truthy(const Value& value);
std::string to_str(const Value& value);   // str(value): what {{ value }} prints
std::string to_repr(const Value& value);  // repr(value): how containers print their items
std::string format_float(double value);   // float.__repr__: 1.0, 1e-05, 1e+16, inf
std::string format_int(int64_t value);

bool equals(const Value& left, const Value& right);  // ==
// <, <=, >, >= ; `op` names the operator in the TypeError for unorderable operands.
bool less_than(const Value& left, const Value& right, std::string_view op);
bool contains(const Value& container, const Value& item);  // item in container
std::vector<Value> iterate(const Value& value);            // list(iter(value))
int64_t length(const Value& value);                        // len(value)

// Positions a Python slice [start:stop:step] selects from `length` items.
std::vector<size_t> slice_indices(size_t length, std::optional<int64_t> start,
                                  std::optional<int64_t> stop, std::optional<int64_t> step);

}  // namespace tq::jinja
