// A Jinja2 subset interpreter sufficient for chat templates (see chat_template.h).
//
// It behaves like the environment HF transformers renders chat templates with:
// jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the
// loopcontrols extension ({% break %}, {% continue %}), transformers' {% generation %} tag, the
// globals raise_exception() and strftime_now(), and transformers' tojson filter (json.dumps with
// ensure_ascii=False and the indent/separators/sort_keys options). Values follow Python
// semantics: {{ [1, 'a'] }} prints "[1, 'a']", {{ 1.0 }} prints "1.0", undefined variables print
// as "" and are falsy.
//
// Not implemented, each raising "chat template line N: unsupported ..." (or "no filter named")
// rather than rendering differently: {% extends %}, {% include %}, {% import %}/{% from %},
// {% block %}, {% autoescape %}, recursive for loops, *args/**kwargs in calls, macro
// varargs/kwargs, str.format and other rare str methods, the filters groupby, pprint, random,
// slice, striptags, urlencode, urlize, wordwrap, xmlattr and filesizeformat, integers beyond 64
// bits, and dict literals with non-string keys.
// Known differences that cannot change a chat prompt's text in practice: range() yields a list
// (prints as [0, 1] rather than range(0, 2)); escape/safe return plain strings (autoescaping is
// off, so Markup's escaping on concatenation is not modelled); `x is sameas y` compares equal
// numbers and strings as identical.
//
// Rendering is const and thread-safe: one Template can serve concurrent requests.
#pragma once
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace tq::jinja {

// Parse and render `source` with `context` as the global variables. Values are JSON-like
// (none, bool, int, float, string, list, dict) plus namespaces, macros and callables.
// Throws tq::Error ("chat template line N: ...") on syntax errors, unsupported features, and
// raise_exception() calls from the template.
// Object keys keep the context's order, as Python dicts do, which `tojson` and printing show:
// pass an ordered_json to control it (a plain nlohmann::json converts, with its keys sorted).
std::string render(const std::string& source, const nlohmann::ordered_json& context);

// A parsed template, for rendering the same template many times (e.g. per request).
class Template {
 public:
  // Throws tq::Error ("chat template line N: ...") on syntax errors and unsupported tags.
  explicit Template(const std::string& source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  std::string render(const nlohmann::ordered_json& context) const;

 private:
  struct Parsed;
  std::unique_ptr<Parsed> parsed_;
};

}  // namespace tq::jinja
