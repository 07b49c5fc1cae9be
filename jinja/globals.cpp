// Global functions: jinja2's (range, dict, namespace, joiner, cycler) and the two transformers
// adds for chat templates (raise_exception, strftime_now).
//
// strftime_now formats the current local time, like transformers' datetime.now().strftime().
// Set TQ_FIXED_DATE=YYYY-MM-DD (optionally followed by "THH:MM:SS" or " HH:MM:SS") to make it
// return that moment instead: the golden tests and reproducible prompt captures rely on it.
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <memory>

#include "jinja/args.h"
#include "jinja/runtime.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

// jinja2's sandbox refuses larger ranges (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Value range_function(const CallArgs& args) {
  if (!args.keyword.empty()) raise_error("TypeError: range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3) {
    raise_error("TypeError: range expected 1 to 3 arguments, got {}", args.positional.size());
  }
  for (const Value& argument : args.positional) {
    if (!argument.is_integral()) {
      raise_error("TypeError: '{}' object cannot be interpreted as an integer", type_name(argument));
    }
  }
  int64_t start = 0, stop = 0, step = 1;
  if (args.positional.size() == 1) {
    stop = args.positional[0].as_int();
  } else {
    start = args.positional[0].as_int();
    stop = args.positional[1].as_int();
    if (args.positional.size() == 3) step = args.positional[2].as_int();
  }
  if (step == 0) raise_error("ValueError: range() arg 3 must not be zero");
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(items.size()) >= kMaxRange) {
      raise_error("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
    }
    items.push_back(Value::integer(i));
  }
  return Value::list(std::move(items));
}

// dict(mapping_or_pairs, **kwargs), which namespace() also accepts.
Dict build_dict(std::string_view function, const CallArgs& args) {
  if (args.positional.size() > 1) {
    raise_error("TypeError: {} expected at most 1 positional argument, got {}", function, args.positional.size());
  }
  Dict dict;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      dict = source.as_dict();
    } else {
      for (const Value& pair : iterate(source)) {
        std::vector<Value> parts = iterate(pair);
        if (parts.size() != 2) raise_error("ValueError: {} sequence elements must have length 2", function);
        if (!parts[0].is_string()) raise_error("unsupported: {} keys must be strings", function);
        dict.set(parts[0].as_string(), parts[1]);
      }
    }
  }
  for (const auto& [name, value] : args.keyword) dict.set(name, value);
  return dict;
}

Value namespace_function(ObjectArena& arena, const CallArgs& args) {
  auto object = arena.make("Namespace");
  object->attributes = build_dict("namespace", args);
  return Value::object(std::move(object));
}

Value joiner_function(const CallArgs& args) {
  BoundArgs bound("joiner", args, {"sep"});
  std::string separator = bound.get_optional_string(0).value_or(", ");
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [separator, used](const CallArgs& call_args) {
    BoundArgs none("joiner", call_args, {});
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(separator);
  });
}

Value cycler_function(ObjectArena& arena, const CallArgs& args) {
  if (args.positional.empty()) raise_error("TypeError: at least one item has to be provided");
  auto object = arena.make("Cycler");
  auto position = std::make_shared<size_t>(0);
  std::vector<Value> items = args.positional;
  object->attributes.set("current", items[0]);
  // The functions update `current` on the shared object; a weak pointer avoids a cycle.
  std::weak_ptr<Object> weak = object;
  object->attributes.set("next", Value::function("next", [items, position, weak](const CallArgs&) {
    Value value = items[*position];
    *position = (*position + 1) % items.size();
    if (auto self = weak.lock()) self->attributes.set("current", items[*position]);
    return value;
  }));
  object->attributes.set("reset", Value::function("reset", [items, position, weak](const CallArgs&) {
    *position = 0;
    if (auto self = weak.lock()) self->attributes.set("current", items[0]);
    return Value::none();
  }));
  return Value::object(std::move(object));
}

Value raise_exception_function(const CallArgs& args) {
  BoundArgs bound("raise_exception", args, {"message"}, 1);
  raise_error("the template raised an error: {}", to_str(bound.get(0)));
}

// TQ_FIXED_DATE, when set, replaces the clock.
std::tm current_time() {
  const char* fixed = std::getenv("TQ_FIXED_DATE");
  if (fixed == nullptr || *fixed == '\0') {
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    return local;
  }
  std::tm parsed{};
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  char separator = 0;
  int fields = std::sscanf(fixed, "%4d-%2d-%2d%c%2d:%2d:%2d", &year, &month, &day, &separator, &hour, &minute, &second);
  bool valid = fields == 3 || (fields >= 6 && (separator == 'T' || separator == ' '));
  if (!valid || month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    raise_error("TQ_FIXED_DATE must look like 2024-07-26 or 2024-07-26T13:05:09, got '{}'", fixed);
  }
  parsed.tm_year = year - 1900;
  parsed.tm_mon = month - 1;
  parsed.tm_mday = day;
  parsed.tm_hour = hour;
  parsed.tm_min = minute;
  parsed.tm_sec = second;
  // Round-trip through timegm to fill in the weekday and day of the year.
  std::time_t as_utc = timegm(&parsed);
  std::tm normalized{};
  gmtime_r(&as_utc, &normalized);
  return normalized;
}

Value strftime_now_function(const CallArgs& args) {
  BoundArgs bound("strftime_now", args, {"format"}, 1);
  if (!bound.get(0).is_string()) raise_error("TypeError: strftime() argument 1 must be str");
  const std::string& format = bound.get(0).as_string();
  std::tm moment = current_time();
  // Python handles %f (microseconds) itself; the C library does not know it.
  std::string c_format;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      if (format[i + 1] == 'f') {
        c_format += "000000";
      } else {
        c_format += format.substr(i, 2);
      }
      ++i;
    } else {
      c_format += format[i];
    }
  }
  if (c_format.empty()) return Value::string("");
  std::string buffer(256 + c_format.size() * 16, '\0');
  size_t written = std::strftime(buffer.data(), buffer.size(), c_format.c_str(), &moment);
  buffer.resize(written);
  return Value::string(std::move(buffer));
}

Value unsupported_function(const char* name) {
  return Value::function(name, [name](const CallArgs&) -> Value {
    raise_error("unsupported global function '{}'", name);
  });
}

}  // namespace

Dict make_global_functions(ObjectArena& arena) {
  Dict globals;
  globals.set("range", Value::function("range", range_function));
  globals.set("dict", Value::function("dict", [](const CallArgs& args) { return Value::dict(build_dict("dict", args)); }));
  globals.set("namespace", Value::function("namespace", [&arena](const CallArgs& args) {
    return namespace_function(arena, args);
  }));
  globals.set("joiner", Value::function("joiner", joiner_function));
  globals.set("cycler", Value::function("cycler", [&arena](const CallArgs& args) {
    return cycler_function(arena, args);
  }));
  globals.set("lipsum", unsupported_function("lipsum"));
  globals.set("raise_exception", Value::function("raise_exception", raise_exception_function));
  globals.set("strftime_now", Value::function("strftime_now", strftime_now_function));
  return globals;
}

}  // namespace tq::jinja
