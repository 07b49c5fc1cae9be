#include "server/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>

#include "server/openai_request.h"

namespace tq {

using nlohmann::json;

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

// {"name": ..., "arguments": ...} (or Llama's "parameters") as a call, else nothing.
bool as_call(const std::string& text, json& call) {
  const json v = json::parse(text, nullptr, false);
  if (v.is_discarded() || !v.is_object() || !v.contains("name") || !v["name"].is_string()) return false;
  const json* args = v.contains("arguments") ? &v["arguments"] : v.contains("parameters") ? &v["parameters"] : nullptr;
  std::string arguments = "{}";
  if (args && args->is_string()) arguments = args->get<std::string>();
  else if (args && !args->is_null()) arguments = args->dump();
  call = {{"name", v["name"]}, {"arguments", arguments}};
  return true;
}

}  // namespace

ToolsRequest parse_tools(const json& body, std::string_view raw_body) {
  ToolsRequest r;
  if (present(body, "tools")) {
    const json& tools = body["tools"];
    if (!tools.is_array()) throw bad_request("'tools' must be a list of tools", "tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      const auto bad = [&](const std::string& what) {
        return bad_request(fmt::format("tools[{}] {}", i, what), "tools");
      };
      if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        throw bad("must be an object of type 'function'");
      if (!present(t, "function") || !t["function"].is_object()) throw bad("needs a 'function' object");
      const json& f = t["function"];
      if (!present(f, "name") || !f["name"].is_string() || !valid_name(f["name"].get<std::string>()))
        throw bad("function needs a 'name' of 1 to 64 letters, digits, '_' or '-'");
      if (present(f, "description") && !f["description"].is_string()) throw bad("function 'description' must be a string");
      if (present(f, "parameters") && !f["parameters"].is_object())
        throw bad("function 'parameters' must be a JSON schema object");
      for (const json& earlier : r.tools)
        if (earlier["function"]["name"] == f["name"]) throw bad(fmt::format("repeats the name '{}'", f["name"].get<std::string>()));
      json tool = {{"type", "function"}, {"function", {{"name", f["name"]}}}};
      if (present(f, "description")) tool["function"]["description"] = f["description"];
      tool["function"]["parameters"] = present(f, "parameters") ? f["parameters"] : json{{"type", "object"}, {"properties", json::object()}};
      r.tools.push_back(std::move(tool));
    }
  }
  r.choice = r.tools.empty() ? ToolsRequest::Choice::none : ToolsRequest::Choice::automatic;
  if (present(body, "tool_choice")) {
    const json& c = body["tool_choice"];
    if (c.is_string()) {
      const std::string s = c.get<std::string>();
      if (s == "none") r.choice = ToolsRequest::Choice::none;
      else if (s == "auto") r.choice = r.tools.empty() ? ToolsRequest::Choice::none : ToolsRequest::Choice::automatic;
      else if (s == "required") r.choice = ToolsRequest::Choice::required;
      else throw bad_request(fmt::format("'tool_choice' '{}' is not one of 'none', 'auto', 'required' or a function", s), "tool_choice");
    } else if (c.is_object() && c.contains("function") && c["function"].is_object() && c["function"].contains("name") &&
               c["function"]["name"].is_string()) {
      r.choice = ToolsRequest::Choice::named;
      r.named = c["function"]["name"].get<std::string>();
    } else {
      throw bad_request("'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                        "tool_choice");
    }
    if ((r.choice == ToolsRequest::Choice::required || r.choice == ToolsRequest::Choice::named) && r.tools.empty())
      throw bad_request("'tool_choice' asks for a tool call but 'tools' lists none", "tool_choice");
    if (r.choice == ToolsRequest::Choice::named &&
        std::none_of(r.tools.begin(), r.tools.end(), [&](const json& t) { return t["function"]["name"] == r.named; }))
      throw bad_request(fmt::format("'tool_choice' names the function '{}', which 'tools' does not list", r.named), "tool_choice");
  }
  if (present(body, "parallel_tool_calls")) {
    if (!body["parallel_tool_calls"].is_boolean()) throw bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    r.parallel = body["parallel_tool_calls"].get<bool>();
  }
  if ((r.choice == ToolsRequest::Choice::required || r.choice == ToolsRequest::Choice::named) && !raw_body.empty()) {
    const auto ordered = nlohmann::ordered_json::parse(raw_body, nullptr, false);
    const bool listed = ordered.is_object() && ordered.contains("tools") && ordered["tools"].is_array() &&
                        ordered["tools"].size() == r.tools.size();
    for (size_t i = 0; listed && i < r.tools.size(); ++i) {
      const json& checked = r.tools[i]["function"]["parameters"];
      // Taken only where it is the schema checked above, key order aside (shapes are looked at
      // again, so no access below can miss).
      const nlohmann::ordered_json& t = ordered["tools"][i];
      const bool same = t.is_object() && t.contains("function") && t["function"].is_object() &&
                        t["function"].contains("parameters") && json::parse(t["function"]["parameters"].dump()) == checked;
      r.parameters_in_order.push_back(same ? t["function"]["parameters"] : nlohmann::ordered_json::parse(checked.dump()));
    }
  }
  return r;
}

std::string tools_system_prompt(const json& tools) {
  std::string s = "You can call these functions (each with the JSON schema of its arguments):\n<tools>\n";
  for (const json& t : tools) s += t["function"].dump() + "\n";
  s += "</tools>\nTo call a function, write <tool_call> on a line, then a JSON object "
       "{\"name\": <the function's name>, \"arguments\": <an object of its arguments>} on the next, then </tool_call>.";
  return s;
}

ToolCallSyntax tool_call_syntax(std::string_view chat_template) {
  const bool renders_tools = chat_template.find("tools") != std::string_view::npos;
  const bool asks_parameters = chat_template.find("\"parameters\"") != std::string_view::npos;
  const bool hermes = chat_template.find(kOpen) != std::string_view::npos;
  return renders_tools && asks_parameters && !hermes ? ToolCallSyntax::bare_json : ToolCallSyntax::hermes;
}

OutputConstraintSpec tool_call_constraint(const ToolsRequest& r, ToolCallSyntax syntax) {
  const char* arguments_key = syntax == ToolCallSyntax::bare_json ? "parameters" : "arguments";
  // Ordered: the name comes first, as the models are trained to write it, then the arguments in
  // the order the function lists them.
  nlohmann::ordered_json alternatives = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const json& f = r.tools[i]["function"];
    if (r.choice == ToolsRequest::Choice::named && f["name"] != r.named) continue;
    nlohmann::ordered_json properties = nlohmann::ordered_json::object();
    properties["name"] = {{"const", f["name"].get<std::string>()}};
    properties[arguments_key] = i < r.parameters_in_order.size() ? r.parameters_in_order[i]
                                                                  : nlohmann::ordered_json::parse(f["parameters"].dump());
    nlohmann::ordered_json alternative = nlohmann::ordered_json::object();
    alternative["type"] = "object";
    alternative["properties"] = std::move(properties);
    alternative["required"] = {"name", arguments_key};
    alternative["additionalProperties"] = false;
    alternatives.push_back(std::move(alternative));
  }
  OutputConstraintSpec spec;
  spec.kind = syntax == ToolCallSyntax::bare_json ? OutputConstraintSpec::Kind::json_schema
                                                  : OutputConstraintSpec::Kind::tool_calls;
  spec.field = "tools";
  spec.text = alternatives.size() == 1 ? alternatives[0].dump() : nlohmann::ordered_json{{"anyOf", alternatives}}.dump();
  // A named function is called once (as OpenAI's tool_choice does); required: up to
  // kMaxParallelCalls calls when parallel_tool_calls allows and the syntax can hold them.
  const bool several = syntax == ToolCallSyntax::hermes && r.parallel && r.choice == ToolsRequest::Choice::required;
  spec.max_repeats = several ? kMaxParallelCalls : 1;
  return spec;
}

std::string tool_calls_as_text(const json& tool_calls) {
  std::string s;
  if (!tool_calls.is_array()) return s;
  for (const json& c : tool_calls) {
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) continue;
    const json& f = c["function"];
    nlohmann::ordered_json call;  // name first, as the model writes it
    call["name"] = f.value("name", "");
    json args = json::object();
    if (f.contains("arguments") && f["arguments"].is_string()) {
      args = json::parse(f["arguments"].get<std::string>(), nullptr, false);
      if (args.is_discarded()) args = f["arguments"];
    } else if (f.contains("arguments")) {
      args = f["arguments"];
    }
    call["arguments"] = args;
    if (!s.empty()) s += "\n";
    s += std::string(kOpen) + "\n" + call.dump() + "\n" + std::string(kClose);
  }
  return s;
}

ParsedToolCalls parse_tool_calls(const std::string& text) {
  ParsedToolCalls out;
  std::string outside;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string::npos) {
      outside += text.substr(pos);
      break;
    }
    outside += text.substr(pos, open - pos);
    const size_t body = open + kOpen.size();
    const size_t close = text.find(kClose, body);
    const size_t end = close == std::string::npos ? text.size() : close;
    json call;
    if (as_call(trim(std::string_view(text).substr(body, end - body)), call)) out.calls.push_back(call);
    else outside += text.substr(open, (close == std::string::npos ? end : close + kClose.size()) - open);
    pos = close == std::string::npos ? text.size() : close + kClose.size();
  }
  out.content = trim(outside);
  // A bare JSON call and nothing else (Llama 3's form).
  json call;
  if (out.calls.empty() && !out.content.empty() && out.content.front() == '{' && as_call(out.content, call)) {
    out.calls.push_back(call);
    out.content.clear();
  }
  return out;
}

size_t tool_calls_closed_prefix(std::string_view text) {
  const size_t close = text.rfind(kClose);
  return close == std::string_view::npos ? 0 : close + kClose.size();
}

size_t tool_call_safe_prefix(std::string_view text) {
  const size_t open = text.find(kOpen);
  if (open != std::string_view::npos) return open;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && text[first] == '{') return 0;  // perhaps a bare JSON call
  for (size_t k = std::min(kOpen.size() - 1, text.size()); k > 0; --k)
    if (text.substr(text.size() - k) == kOpen.substr(0, k)) return text.size() - k;
  return text.size();
}

}  // namespace tq
