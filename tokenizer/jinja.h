// A Jinja2 subset interpreter sufficient for chat templates (see chat_template.h).
#pragma once
#include <nlohmann/json.hpp>

#include <string>

namespace tq::jinja {

// Parse and render `source` with `context` as the global variables. Values are JSON-like
// (none, bool, int, float, string, list, dict) plus namespaces, macros and callables.
// Throws tq::Error ("chat template line N: ...") on syntax errors, unsupported features, and
// raise_exception() calls from the template.
std::string render(const std::string& source, const nlohmann::json& context);

}  // namespace tq::jinja
