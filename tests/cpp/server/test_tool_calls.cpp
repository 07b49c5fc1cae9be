// Tool calling's request and answer handling (server/tool_calls.h): tools and tool_choice are
// checked with the field named; a finished answer splits into text and calls (Hermes blocks, or a
// bare JSON call as Llama 3 writes it); a stream releases content only up to where a call may
// begin, so it reassembles to the whole answer; the real Qwen2.5, Qwen3 and Llama 3.2 templates
// render the tools, an earlier call and its result themselves.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "server/openai_request.h"
#include "server/tool_calls.h"
#include "support/testdata_support.h"

namespace tq {
namespace {

using nlohmann::json;

json weather_tools() {
  return json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
      {"type": "function", "function": {"name": "add"}}])");
}

std::string param_of(const json& body) {
  try {
    parse_tools(body);
  } catch (const ApiError& e) {
    return e.param + ": " + e.what();
  }
  return "accepted";
}

TEST(ToolCalls, ToolsAndToolChoiceAreChecked) {
  const ToolsRequest r = parse_tools({{"tools", weather_tools()}});
  EXPECT_EQ(r.choice, ToolsRequest::Choice::automatic);
  EXPECT_TRUE(r.active());
  EXPECT_EQ(r.tools[1]["function"]["parameters"], json::parse(R"({"type": "object", "properties": {}})"));
  const ToolsRequest named = parse_tools({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "add"}}}}}});
  EXPECT_EQ(named.choice, ToolsRequest::Choice::named);
  EXPECT_EQ(named.named, "add");
  EXPECT_FALSE(parse_tools({{"tools", weather_tools()}, {"tool_choice", "none"}}).active());
  EXPECT_FALSE(parse_tools({{"tool_choice", "auto"}}).active());

  EXPECT_EQ(param_of({{"tools", "x"}}), "tools: 'tools' must be a list of tools");
  EXPECT_EQ(param_of({{"tools", {{{"type", "function"}, {"function", {{"name", "bad name"}}}}}}}),
            "tools: tools[0] function needs a 'name' of 1 to 64 letters, digits, '_' or '-'");
  EXPECT_EQ(param_of({{"tools", {{{"type", "retrieval"}}}}}), "tools: tools[0] must be an object of type 'function'");
  EXPECT_NE(param_of({{"tools", weather_tools()}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}})
                .find("tool_choice: 'tool_choice' names the function 'nope', which 'tools' does not list"),
            std::string::npos);
  EXPECT_NE(param_of({{"tool_choice", "required"}}).find("'tools' lists none"), std::string::npos);
  EXPECT_NE(param_of({{"tools", weather_tools()}, {"tool_choice", "sometimes"}}).find("is not one of"), std::string::npos);
  json twice = weather_tools();
  twice[1]["function"]["name"] = "get_weather";
  EXPECT_NE(param_of({{"tools", twice}}).find("repeats the name 'get_weather'"), std::string::npos);
}

// The constraint asks for the name first and the arguments in the order the request listed them
// (the raw body's order, not nlohmann::json's sorted keys); Llama 3's syntax is one bare object
// with "parameters".
TEST(ToolCalls, ConstrainedCallsKeepTheRequestsKeyOrder) {
  const std::string raw = R"({"tools": [{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"zone": {"type": "string"}, "city": {"type": "string"}},
                     "required": ["zone", "city"]}}}],
      "tool_choice": "required"})";
  const ToolsRequest r = parse_tools(json::parse(raw), raw);
  ASSERT_EQ(r.parameters_in_order.size(), 1u);
  const OutputConstraintSpec hermes = tool_call_constraint(r);
  EXPECT_EQ(hermes.kind, OutputConstraintSpec::Kind::tool_calls);
  EXPECT_EQ(hermes.max_repeats, kMaxParallelCalls);
  EXPECT_LT(hermes.text.find("\"name\""), hermes.text.find("\"arguments\"")) << hermes.text;
  EXPECT_LT(hermes.text.find("\"zone\""), hermes.text.find("\"city\"")) << hermes.text;
  EXPECT_EQ(json::parse(hermes.text)["properties"]["arguments"], json::parse(raw)["tools"][0]["function"]["parameters"]);
  const OutputConstraintSpec llama = tool_call_constraint(r, ToolCallSyntax::bare_json);
  EXPECT_EQ(llama.kind, OutputConstraintSpec::Kind::json_schema);
  EXPECT_EQ(llama.max_repeats, 1);  // Llama 3's templates hold one call
  EXPECT_LT(llama.text.find("\"name\""), llama.text.find("\"parameters\"")) << llama.text;
  EXPECT_EQ(json::parse(llama.text)["required"], json::parse(R"(["name", "parameters"])"));
  // Without the raw body: the same schema, sorted keys, name still first.
  const OutputConstraintSpec unordered = tool_call_constraint(parse_tools(json::parse(raw)));
  EXPECT_LT(unordered.text.find("\"name\""), unordered.text.find("\"arguments\""));
  EXPECT_EQ(json::parse(unordered.text), json::parse(hermes.text));
}

TEST(ToolCalls, AnswersSplitIntoTextAndCalls) {
  ParsedToolCalls p = parse_tool_calls(
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1}\"}\n</tool_call>");
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0]["name"], "get_weather");
  EXPECT_EQ(json::parse(p.calls[0]["arguments"].get<std::string>()), json::parse(R"({"city": "Oslo"})"));
  EXPECT_EQ(p.calls[1]["arguments"], "{\"a\": 1}");  // a string argument stays as given

  p = parse_tool_calls(R"({"name": "add", "parameters": {"a": 2, "b": 3}})");  // Llama 3's bare form
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(json::parse(p.calls[0]["arguments"].get<std::string>()), json::parse(R"({"a": 2, "b": 3})"));
  EXPECT_EQ(p.content, "");

  p = parse_tool_calls("<tool_call>\nnot json\n</tool_call> and text");  // not a call: stays text
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "<tool_call>\nnot json\n</tool_call> and text");
  EXPECT_EQ(parse_tool_calls("  plain answer \n").content, "plain answer");
}

TEST(ToolCalls, StreamsReleaseContentOnlyBeforeACall) {
  EXPECT_EQ(tool_call_safe_prefix("Hello there"), 11u);
  EXPECT_EQ(tool_call_safe_prefix("Hello <tool"), 6u);  // may still become <tool_call>
  EXPECT_EQ(tool_call_safe_prefix("Hello <tool_call>\n{"), 6u);
  EXPECT_EQ(tool_call_safe_prefix("Hello <b>"), 9u);
  EXPECT_EQ(tool_call_safe_prefix("  {\"name\""), 0u);  // perhaps a bare JSON call
}

// A stream sends each call once its closing tag is written: the text up to the last closing tag
// parses to the same first calls as the whole answer does.
TEST(ToolCalls, ClosedCallsAreFinalWhileTheAnswerGoesOn) {
  const std::string first = "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": \"</tool\"}}\n</tool_call>";
  const std::string whole = first + "\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  EXPECT_EQ(tool_calls_closed_prefix("Sure.\n<tool_call>\n{\"name\""), 0u);
  for (size_t cut = first.size(); cut < whole.size(); ++cut) {
    const std::string partial = whole.substr(0, cut);
    ASSERT_EQ(tool_calls_closed_prefix(partial), first.size()) << partial;
    const ParsedToolCalls early = parse_tool_calls(partial.substr(0, tool_calls_closed_prefix(partial)));
    ASSERT_EQ(early.calls.size(), 1u);
    EXPECT_EQ(early.calls[0], parse_tool_calls(whole).calls[0]);
  }
  EXPECT_EQ(tool_calls_closed_prefix(whole), whole.size());
  EXPECT_EQ(parse_tool_calls(whole).calls.size(), 2u);
}

TEST(ToolCalls, EarlierCallsAreWrittenAsTheModelWritesThem) {
  const json calls = json::parse(R"([{"id": "c1", "type": "function",
      "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}}])");
  const std::string text = tool_calls_as_text(calls);
  EXPECT_EQ(text, "<tool_call>\n{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}\n</tool_call>");
  const ParsedToolCalls back = parse_tool_calls(text);
  ASSERT_EQ(back.calls.size(), 1u);
  EXPECT_EQ(back.calls[0]["name"], "add");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCalls, RealTemplatesRenderToolsCallsAndResults) {
  TQ_REQUIRE_TESTDATA();
  const auto tokenizer = Tokenizer::from_hf_dir(test::testdata("qwen2-tokenizer"));
  const json body = json::parse(R"({"messages": [
      {"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
          "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "minus four and snowing"}]})");
  json with_tools = body;
  with_tools["tools"] = weather_tools();
  for (const char* name : {"Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "meta-llama-Llama-3.2-3B-Instruct"}) {
    ServedModel m;
    m.name = "t";
    m.tokenizer = tokenizer.get();
    m.chat_prompt = ChatPrompt(read_file(test::testdata(std::string("llama.cpp-vocab/templates/") + name + ".jinja")));
    m.max_model_len = 4096;
    m.vocab_size = tokenizer->vocab_size() + 1000;  // room for the added tokens the templates name
    const ApiRequest r = parse_chat_request(with_tools, m, RequestLimits{});
    EXPECT_TRUE(r.tool_calls) << name;
    EXPECT_EQ(tool_call_syntax(m.chat_prompt.source()),
              std::string(name).starts_with("meta-llama") ? ToolCallSyntax::bare_json : ToolCallSyntax::hermes)
        << name;
    const std::string prompt = tokenizer->decode(r.prompts[0], false);
    EXPECT_NE(prompt.find("\"get_weather\""), std::string::npos) << name << prompt;  // the tool's description
    EXPECT_NE(prompt.find("\"city\""), std::string::npos) << name;
    EXPECT_NE(prompt.find("Oslo"), std::string::npos) << name;                      // the earlier call
    EXPECT_NE(prompt.find("minus four and snowing"), std::string::npos) << name;    // its result
    // Without tools the same conversation renders without the tools' descriptions.
    const std::string plain = tokenizer->decode(parse_chat_request(body, m, RequestLimits{}).prompts[0], false);
    EXPECT_NE(plain.find("Weather in Oslo?"), std::string::npos) << name;
    EXPECT_EQ(plain.find("\"description\""), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace tq
