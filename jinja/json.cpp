#include "jinja/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "jinja/pystr.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

Value convert(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(json.get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(json.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto value = json.get<uint64_t>();
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        raise_error("template context: integer {} does not fit in 64 bits", value);
      }
      return Value::integer(static_cast<int64_t>(value));
    }
    case nlohmann::json::value_t::number_float: return Value::floating(json.get<double>());
    case nlohmann::json::value_t::string: return Value::string(json.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& element : json) items.push_back(convert(element));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      for (auto it = json.begin(); it != json.end(); ++it) dict.set(it.key(), convert(it.value()));
      return Value::dict(std::move(dict));
    }
    default: raise_error("template context: unsupported JSON value type '{}'", json.type_name());
  }
}

void append_json_string(std::string& out, const std::string& text, bool ensure_ascii) {
  out += '"';
  for (char32_t c : pystr::decode(text)) {
    switch (c) {
      case U'"': out += "\\\""; break;
      case U'\\': out += "\\\\"; break;
      case U'\n': out += "\\n"; break;
      case U'\r': out += "\\r"; break;
      case U'\t': out += "\\t"; break;
      case U'\b': out += "\\b"; break;
      case U'\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
        } else if (ensure_ascii && c > 0x7E) {
          if (c >= 0x10000) {  // a UTF-16 surrogate pair, as json.dumps writes it
            char32_t offset = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (offset >> 10), 0xDC00 + (offset & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          pystr::append_code_point(out, c);
        }
    }
  }
  out += '"';
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {
    item_separator_ = options.item_separator.value_or(options.indent ? "," : ", ");
    key_separator_ = options.key_separator.value_or(": ");
  }

  void write(const Value& value, int depth) {
    switch (value.kind()) {
      case Value::Kind::kNone: out_ += "null"; return;
      case Value::Kind::kBool: out_ += value.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out_ += format_int(value.as_int()); return;
      case Value::Kind::kFloat: write_float(value.as_double()); return;
      case Value::Kind::kString: append_json_string(out_, value.as_string(), options_.ensure_ascii); return;
      case Value::Kind::kSequence: {
        auto style = value.as_sequence().style;
        if (style != SequenceStyle::kList && style != SequenceStyle::kTuple) break;
        write_array(value.items(), depth);
        return;
      }
      case Value::Kind::kDict: write_object(value.as_dict(), depth); return;
      default: break;
    }
    raise_error("TypeError: Object of type {} is not JSON serializable", type_name(value));
  }

  std::string take() { return std::move(out_); }

 private:
  void write_float(double value) {
    if (std::isnan(value)) {
      out_ += "NaN";
    } else if (std::isinf(value)) {
      out_ += value < 0 ? "-Infinity" : "Infinity";
    } else {
      out_ += format_float(value);
    }
  }

  // Before each item: the separator (after the first) and, when indenting, a new line.
  void begin_item(bool first, int depth) {
    if (!first) out_ += item_separator_;
    if (options_.indent) {
      out_ += '\n';
      for (int i = 0; i < depth; ++i) out_ += *options_.indent;
    }
  }

  void end_container(int depth, char closing) {
    if (options_.indent) {
      out_ += '\n';
      for (int i = 0; i < depth; ++i) out_ += *options_.indent;
    }
    out_ += closing;
  }

  void write_array(const std::vector<Value>& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      begin_item(i == 0, depth + 1);
      write(items[i], depth + 1);
    }
    end_container(depth, ']');
  }

  void write_object(const Dict& dict, int depth) {
    if (dict.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const Dict::Entry*> entries;
    for (const auto& entry : dict.entries()) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const Dict::Entry* a, const Dict::Entry* b) { return a->first < b->first; });
    }
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      begin_item(i == 0, depth + 1);
      append_json_string(out_, entries[i]->first, options_.ensure_ascii);
      out_ += key_separator_;
      write(entries[i]->second, depth + 1);
    }
    end_container(depth, '}');
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
  std::string out_;
};

}  // namespace

Value from_json(const nlohmann::ordered_json& json) { return convert(json); }

std::string dump_json(const Value& value, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  writer.write(value, 0);
  return writer.take();
}

}  // namespace tq::jinja
