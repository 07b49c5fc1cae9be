// Tool calling through the chat API: the request's `tools`, `tool_choice` and
// `parallel_tool_calls`, how the model is told about the tools, the constraint that makes a
// required or named call valid by construction, and the model's answer split back into text and
// `tool_calls`.
//
// The call syntax is Hermes' (Qwen2, Qwen2.5 and Qwen3 are trained on it; their chat templates
// render `tools` and ask for it): each call a line `<tool_call>`, then a JSON object
// {"name": ..., "arguments": {...}}, then `</tool_call>`. A model whose template does not render
// tools (SmolLM2's) gets the same instructions in a system message.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "engine/structured_output.h"

namespace tq {

struct ToolsRequest {
  enum class Choice { none, automatic, required, named };
  nlohmann::json tools = nlohmann::json::array();  // OpenAI's list, checked: [{"type": "function", "function": {...}}]
  Choice choice = Choice::none;
  std::string named;  // Choice::named: the function's name
  bool parallel = true;
  // Each tool's parameter schema with its keys in the order the request sent them (the order the
  // model is asked to write the arguments in); empty when the raw body was not at hand.
  std::vector<nlohmann::ordered_json> parameters_in_order;
  bool active() const { return !tools.empty() && choice != Choice::none; }
};

// tools / tool_choice / parallel_tool_calls of a chat request. Throws ApiError (400) naming the
// field: a tool without a name, parameters that are not a schema object, tool_choice naming a tool
// that is not listed, tool_choice without tools.
// raw_body: the request as sent, read again in key order when a call is required or named.
ToolsRequest parse_tools(const nlohmann::json& body, std::string_view raw_body = {});

// A system message that lists the tools and the call syntax, for templates that do not render
// `tools` themselves.
std::string tools_system_prompt(const nlohmann::json& tools);

// How the model writes a call: Hermes' tags, or (Llama 3.1 / 3.2's templates, which ask for it)
// one bare JSON object {"name": ..., "parameters": {...}}.
enum class ToolCallSyntax { hermes, bare_json };
// From the chat template's source: bare JSON when the template renders tools itself, asks for
// "parameters" and never mentions <tool_call>; Hermes otherwise (also for templates that know no
// tools, which get tools_system_prompt's Hermes instructions).
ToolCallSyntax tool_call_syntax(std::string_view chat_template);

// required / named: the output is one call of a listed function (required with
// parallel_tool_calls and Hermes' syntax: one to kMaxParallelCalls calls; the bare JSON form
// holds one call), its arguments valid for that function's parameter schema.
constexpr int kMaxParallelCalls = 4;
OutputConstraintSpec tool_call_constraint(const ToolsRequest& tools, ToolCallSyntax syntax = ToolCallSyntax::hermes);

// An assistant message's tool_calls written as the model writes them (for the conversation's
// earlier turns, when the template does not render tool_calls).
std::string tool_calls_as_text(const nlohmann::json& tool_calls);

struct ParsedToolCalls {
  std::string content;                // the text outside the calls (trimmed)
  std::vector<nlohmann::json> calls;  // {"name", "arguments" (a JSON text)}
};
// The finished answer split into text and calls. A block that is not a JSON object with a string
// name stays in the text.
ParsedToolCalls parse_tool_calls(const std::string& text);

// Streaming: the text up to the end of its last closing tag (0 if none is written yet); its calls
// are final.
size_t tool_calls_closed_prefix(std::string_view text);

// Streaming: how much of `text` may go out as content now: up to the first call's start, less a
// trailing part that could still become one.
size_t tool_call_safe_prefix(std::string_view text);

}  // namespace tq
