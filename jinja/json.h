// JSON in and out of the interpreter: template context from nlohmann JSON, and the `tojson`
// filter as HF transformers defines it (Python json.dumps, ensure_ascii=False by default).
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "jinja/value.h"

namespace tq::jinja {

// Objects keep their key order, as a Python dict would (a plain nlohmann::json converted to
// ordered_json has its keys sorted already).
Value from_json(const nlohmann::ordered_json& json);

// The arguments of Python's json.dumps that chat templates pass.
struct JsonDumpOptions {
  std::optional<std::string> indent;  // None: one line; otherwise the per-level indent text
  std::optional<std::string> item_separator;  // default ", " (one line) or "," (indented)
  std::optional<std::string> key_separator;   // default ": "
  bool sort_keys = false;
  bool ensure_ascii = false;
};

std::string dump_json(const Value& value, const JsonDumpOptions& options);

}  // namespace tq::jinja
