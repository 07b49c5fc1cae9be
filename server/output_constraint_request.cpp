#include "server/output_constraint_request.h"

#include <fmt/format.h>

#include "server/openai_request.h"

namespace tq {

using nlohmann::json;
using Kind = OutputConstraintSpec::Kind;

namespace {

// The schema at `path` of the body as sent (`ordered`, when at hand), in its own key order: a
// schema's properties are generated in the order it lists them (as OpenAI's structured outputs
// do), which the key-sorted `json` loses.
std::string ordered_dump(const json& v, const nlohmann::ordered_json* ordered, std::initializer_list<const char*> path) {
  if (!ordered) return v.dump();
  const nlohmann::ordered_json* node = ordered;
  for (const char* key : path) {
    if (!node->is_object() || !node->contains(key)) return v.dump();
    node = &(*node)[key];
  }
  return node->dump();
}

// A schema given as an object, or as a string holding one (vLLM accepts both for guided_json).
std::string schema_text(const json& v, const std::string& field, const nlohmann::ordered_json* ordered,
                        std::initializer_list<const char*> path) {
  if (v.is_object() || v.is_boolean()) return ordered_dump(v, ordered, path);
  if (v.is_string()) return v.get<std::string>();
  throw bad_request(fmt::format("'{}' must be a JSON schema (an object, or a string holding one), not {}", field,
                                v.type_name()),
                    field);
}

std::string string_field(const json& v, const std::string& field) {
  if (!v.is_string() || v.get<std::string>().empty())
    throw bad_request(fmt::format("'{}' must be a non-empty string", field), field);
  return v.get<std::string>();
}

std::vector<std::string> choices_field(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) throw bad_request(fmt::format("'{}' must be a non-empty list of strings", field), field);
  std::vector<std::string> out;
  for (const json& e : v) {
    if (!e.is_string()) throw bad_request(fmt::format("'{}' must be a non-empty list of strings", field), field);
    out.push_back(e.get<std::string>());
  }
  return out;
}

OutputConstraintSpec make(Kind kind, std::string field, std::string text = {}, std::vector<std::string> choices = {}) {
  OutputConstraintSpec s;
  s.kind = kind;
  s.field = std::move(field);
  s.text = std::move(text);
  s.choices = std::move(choices);
  return s;
}

std::optional<OutputConstraintSpec> from_response_format(const json& body, const nlohmann::ordered_json* ordered) {
  if (!present(body, "response_format")) return std::nullopt;
  const json& rf = body["response_format"];
  if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
    throw bad_request("'response_format' must be an object with a string 'type'", "response_format");
  const std::string type = rf["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") return make(Kind::json_object, "response_format");
  if (type == "json_schema") {
    if (!present(rf, "json_schema") || !rf["json_schema"].is_object())
      throw bad_request("response_format type 'json_schema' needs a 'json_schema' object", "response_format.json_schema");
    const json& js = rf["json_schema"];
    if (!present(js, "schema"))  // OpenAI allows no schema: any JSON object then
      return make(Kind::json_object, "response_format.json_schema");
    return make(Kind::json_schema, "response_format.json_schema.schema",
                schema_text(js["schema"], "response_format.json_schema.schema", ordered, {"response_format", "json_schema", "schema"}));
  }
  throw bad_request(
      fmt::format("response_format type '{}' is not one of 'text', 'json_object', 'json_schema'", type),
      "response_format");
}

}  // namespace

std::optional<OutputConstraintSpec> parse_output_constraint(const json& body, std::string_view raw_body) {
  // Parsed again in key order only when a schema field is there (most requests have none).
  const bool has_schema = present(body, "response_format") || present(body, "guided_json") ||
                          present(body, "structured_outputs") || present(body, "json_schema");
  std::optional<nlohmann::ordered_json> ordered_body;
  if (has_schema && !raw_body.empty()) {
    ordered_body = nlohmann::ordered_json::parse(raw_body, nullptr, false);
    if (ordered_body->is_discarded()) ordered_body.reset();
  }
  const nlohmann::ordered_json* ordered = ordered_body ? &*ordered_body : nullptr;
  std::vector<OutputConstraintSpec> asked;
  if (auto s = from_response_format(body, ordered)) asked.push_back(std::move(*s));
  // vLLM's extra parameters (older guided_* and the newer structured_outputs object).
  if (present(body, "guided_json")) asked.push_back(make(Kind::json_schema, "guided_json", schema_text(body["guided_json"], "guided_json", ordered, {"guided_json"})));
  if (present(body, "guided_regex")) asked.push_back(make(Kind::regex, "guided_regex", string_field(body["guided_regex"], "guided_regex")));
  if (present(body, "guided_choice"))
    asked.push_back(make(Kind::choice, "guided_choice", {}, choices_field(body["guided_choice"], "guided_choice")));
  if (present(body, "guided_grammar"))
    asked.push_back(make(Kind::grammar, "guided_grammar", string_field(body["guided_grammar"], "guided_grammar")));
  if (present(body, "structured_outputs")) {
    const json& so = body["structured_outputs"];
    if (!so.is_object()) throw bad_request("'structured_outputs' must be an object", "structured_outputs");
    if (present(so, "json"))
      asked.push_back(make(Kind::json_schema, "structured_outputs.json", schema_text(so["json"], "structured_outputs.json", ordered, {"structured_outputs", "json"})));
    if (present(so, "regex"))
      asked.push_back(make(Kind::regex, "structured_outputs.regex", string_field(so["regex"], "structured_outputs.regex")));
    if (present(so, "choice"))
      asked.push_back(make(Kind::choice, "structured_outputs.choice", {}, choices_field(so["choice"], "structured_outputs.choice")));
    if (present(so, "grammar"))
      asked.push_back(
          make(Kind::grammar, "structured_outputs.grammar", string_field(so["grammar"], "structured_outputs.grammar")));
    if (present(so, "json_object")) {
      if (!so["json_object"].is_boolean())
        throw bad_request("'structured_outputs.json_object' must be a boolean", "structured_outputs.json_object");
      if (so["json_object"].get<bool>()) asked.push_back(make(Kind::json_object, "structured_outputs.json_object"));
    }
    for (const char* unsupported : {"structural_tag", "whitespace_pattern"})
      if (present(so, unsupported))
        throw bad_request(fmt::format("'structured_outputs.{}' is not supported by this server", unsupported),
                          std::string("structured_outputs.") + unsupported);
  }
  // llama.cpp's server fields.
  if (present(body, "grammar")) asked.push_back(make(Kind::grammar, "grammar", string_field(body["grammar"], "grammar")));
  if (present(body, "json_schema"))
    asked.push_back(make(Kind::json_schema, "json_schema", schema_text(body["json_schema"], "json_schema", ordered, {"json_schema"})));
  if (asked.empty()) return std::nullopt;
  if (asked.size() > 1)
    throw bad_request(fmt::format("'{}' and '{}' both constrain the output: give one", asked[0].field, asked[1].field),
                      asked[1].field);
  return std::move(asked[0]);
}

}  // namespace tq
