#!/usr/bin/env python3
"""Golden outputs for tqserve's C++ Jinja chat template interpreter.

Renders real chat templates with Python jinja2 configured exactly like HF transformers'
apply_chat_template (transformers/utils/chat_template_utils.py: _compile_jinja_template and
render_jinja_template):

  * jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[AssistantTracker, jinja2.ext.loopcontrols]); GenerationTag below stands in for
    AssistantTracker ({% generation %}), whose span tracking does not change the output
  * filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
    sort_keys=sort_keys)
  * globals raise_exception(message) -> TemplateError, strftime_now(format)
  * render(messages=..., tools=None-or-list, documents=None, add_generation_prompt=...,
    bos_token=..., eos_token=..., **extra)

strftime_now is pinned to FIXED_DATE; the C++ test sets TQ_FIXED_DATE to the same value, which
the C++ strftime_now honours (jinja/globals.cpp).

Writes tests/data/chat_templates/golden.json (inputs + expected output or expected error).
With --check-unit-tests, instead verifies the expectations written in tests/cpp/jinja/test_jinja.cpp
against jinja2 (the same environment) and reports mismatches.

Usage:  python3 tools/gen_chat_template_golden.py [--check-unit-tests]
Needs:  jinja2 >= 3.1 (pip install jinja2). Run from anywhere; paths are relative to the repo.
"""
import argparse
import datetime
import json
import re
import sys
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

REPO = Path(__file__).resolve().parent.parent
TESTDATA = REPO.parent / "shared" / "testdata"
OUTPUT = REPO / "tests" / "data" / "chat_templates" / "golden.json"
UNIT_TESTS = REPO / "tests" / "cpp" / "jinja" / "test_jinja.cpp"

FIXED_DATE = "2024-07-26"  # TQ_FIXED_DATE for the C++ side

# root "testdata": relative to ../shared/testdata; root "source": relative to the repo.
TEMPLATES = {
    "qwen3": ("testdata", "llama.cpp-vocab/templates/Qwen-Qwen3-0.6B.jinja"),
    "qwen2.5": ("testdata", "llama.cpp-vocab/templates/Qwen-Qwen2.5-7B-Instruct.jinja"),
    "llama3.2": ("testdata", "llama.cpp-vocab/templates/meta-llama-Llama-3.2-3B-Instruct.jinja"),
    "smollm2": ("source", "tests/data/chat_templates/smollm2.jinja"),
}

SPECIAL_TOKENS = {
    "qwen3": ("", "<|im_end|>"),
    "qwen2.5": ("", "<|im_end|>"),
    "llama3.2": ("<|begin_of_text|>", "<|eot_id|>"),
    "smollm2": ("<|im_start|>", "<|im_end|>"),
}


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %}...{% endgeneration %}: renders its body (transformers also
    records the output span for assistant masks, which does not change the rendered text)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.datetime.fromisoformat(FIXED_DATE).strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def read_template(name):
    root, path = TEMPLATES[name]
    base = TESTDATA if root == "testdata" else REPO
    return (base / path).read_text(encoding="utf-8")


# ---- conversations ---------------------------------------------------------------------------
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT = {"role": "assistant", "content": "The capital of France is Paris."}
USER2 = {"role": "user", "content": "And of Germany?"}
THINKING_ASSISTANT = {
    "role": "assistant",
    "content": "<think>\nThe user asks about France. Paris.\n</think>\n\nThe capital of France is Paris.",
}
UNICODE_USER = {"role": "user", "content": "Привет, 世界! 🎉 café — naïve\ttab \"quotes\" 'single' \\ backslash"}
UNICODE_ASSISTANT = {"role": "assistant", "content": "¡Hola! 你好 👋🏽 Ελληνικά"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and country, e.g. Paris, France"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["location"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time (ünïcode in description)",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": []},
    },
}
WEATHER_CALL = {"type": "function", "function": {"name": "get_current_weather", "arguments": {"location": "Paris, France", "unit": "celsius"}}}
TIME_CALL = {"type": "function", "function": {"name": "get_time", "arguments": {"zone": "Europe/Paris"}}}
TOOL_USER = {"role": "user", "content": "What's the weather like in Paris right now, and what time is it?"}


def tool_conversation(calls, responses, content=""):
    messages = [SYSTEM, TOOL_USER, {"role": "assistant", "content": content, "tool_calls": calls}]
    messages += [{"role": "tool", "content": response} for response in responses]
    return messages


def build_cases():
    """(name, template, messages, add_generation_prompt, extra) for every golden case."""
    cases = []

    def add(name, template, messages, add_generation_prompt, extra=None):
        cases.append((name, template, messages, add_generation_prompt, extra or {}))

    basic = {
        "system_user": [SYSTEM, USER],
        "user_only": [USER],
        "multi_turn": [SYSTEM, USER, ASSISTANT, USER2],
        "multi_turn_no_system": [USER, ASSISTANT, USER2],
        "ends_with_assistant": [SYSTEM, USER, ASSISTANT],
        "unicode": [SYSTEM, UNICODE_USER, UNICODE_ASSISTANT, UNICODE_USER],
        "empty_content": [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                          {"role": "assistant", "content": ""}, {"role": "user", "content": ""}],
        "whitespace_content": [{"role": "user", "content": "  padded\n\n"}, {"role": "assistant", "content": "\n ok \n"}],
    }
    for template in TEMPLATES:
        for conversation, messages in basic.items():
            for add_generation_prompt in (True, False):
                add(f"{template}/{conversation}/gen={int(add_generation_prompt)}", template, messages, add_generation_prompt)

    # Qwen3 thinking switch and reasoning parsing.
    for enable_thinking in (None, True, False):
        extra = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        label = "absent" if enable_thinking is None else str(enable_thinking).lower()
        add(f"qwen3/thinking_{label}", "qwen3", [SYSTEM, USER], True, extra)
        add(f"qwen3/thinking_{label}/history", "qwen3", [USER, THINKING_ASSISTANT, USER2], True, extra)
    add("qwen3/think_in_last_assistant", "qwen3", [USER, THINKING_ASSISTANT], False)
    add("qwen3/reasoning_content_field", "qwen3",
        [USER, {"role": "assistant", "content": "Paris.", "reasoning_content": "Simple geography."}], False)
    add("qwen3/reasoning_after_last_query", "qwen3",
        [USER, {"role": "assistant", "content": "Paris.", "reasoning_content": "Simple geography."}, USER2,
         {"role": "assistant", "content": "<think>Berlin, clearly.</think>Berlin."}], False)
    for template in ("smollm2", "qwen2.5"):
        add(f"{template}/thinking_markup_is_plain_text", template, [USER, THINKING_ASSISTANT, USER2], True)

    # Tool calling.
    tools = [WEATHER_TOOL, TIME_TOOL]
    for template in ("qwen3", "qwen2.5"):
        add(f"{template}/tools_declared", template, [SYSTEM, TOOL_USER], True, {"tools": tools})
        add(f"{template}/tools_no_system", template, [TOOL_USER], True, {"tools": tools})
        add(f"{template}/tool_call_round_trip", template,
            tool_conversation([WEATHER_CALL, TIME_CALL], ['{"temperature": 22, "unit": "celsius"}', "14:05"])
            + [{"role": "assistant", "content": "It is 22 °C and 14:05 in Paris."}],
            True, {"tools": tools})
        add(f"{template}/tool_call_with_content", template,
            tool_conversation([WEATHER_CALL], ['{"temperature": 22}'], content="Let me check."), True, {"tools": tools})
    add("qwen3/tool_call_string_arguments", "qwen3",
        tool_conversation([{"type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}], ["12:00"]),
        True, {"tools": tools})
    add("qwen3/tool_call_without_function_wrapper", "qwen3",
        tool_conversation([{"name": "get_time", "arguments": {"zone": "UTC"}}], ["12:00"]), True, {"tools": tools})
    add("qwen3/tool_response_in_user_turn_is_not_a_query", "qwen3",
        [TOOL_USER, {"role": "assistant", "content": "<think>need tool</think>", "tool_calls": [TIME_CALL]},
         {"role": "user", "content": "<tool_response>\n14:05\n</tool_response>"}], True, {"tools": tools})

    add("llama3.2/tools_in_user_message", "llama3.2", [SYSTEM, TOOL_USER], True, {"tools": tools})
    add("llama3.2/tools_in_system_message", "llama3.2", [SYSTEM, TOOL_USER], True,
        {"tools": tools, "tools_in_user_message": False})
    add("llama3.2/tool_call_round_trip", "llama3.2",
        tool_conversation([WEATHER_CALL], ['{"temperature": 22, "unit": "celsius"}'])
        + [{"role": "assistant", "content": "It is 22 °C in Paris."}], True, {"tools": tools})
    add("llama3.2/custom_tools", "llama3.2", [TOOL_USER], True, {"custom_tools": [WEATHER_TOOL]})
    add("llama3.2/date_string_given", "llama3.2", [SYSTEM, USER], True, {"date_string": "01 Jan 2025"})
    add("llama3.2/error_multiple_tool_calls", "llama3.2",
        tool_conversation([WEATHER_CALL, TIME_CALL], ["22", "14:05"]), True, {"tools": tools})
    add("llama3.2/error_tools_without_user_message", "llama3.2", [SYSTEM], True, {"tools": tools})
    return cases


def render_case(env, template_source, messages, add_generation_prompt, bos_token, eos_token, extra):
    variables = {
        "messages": messages,
        "tools": None,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_token,
        "eos_token": eos_token,
    }
    variables.update(extra)
    return env.from_string(template_source).render(**variables)


def generate():
    env = make_environment()
    sources = {name: read_template(name) for name in TEMPLATES}
    golden_cases = []
    for name, template, messages, add_generation_prompt, extra in build_cases():
        bos_token, eos_token = SPECIAL_TOKENS[template]
        case = {
            "name": name,
            "template": template,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": bos_token,
            "eos_token": eos_token,
            "extra": extra,
        }
        try:
            case["expected"] = render_case(env, sources[template], messages, add_generation_prompt, bos_token, eos_token, extra)
        except jinja2.exceptions.TemplateError as error:
            case["expected_error"] = str(error)
        golden_cases.append(case)
    golden = {
        "comment": "Generated by tools/gen_chat_template_golden.py with jinja2 set up like HF transformers; "
                   "render with TQ_FIXED_DATE=fixed_date. Do not edit by hand.",
        "jinja2_version": jinja2.__version__,
        "fixed_date": FIXED_DATE,
        "templates": {name: {"root": root, "path": path} for name, (root, path) in TEMPLATES.items()},
        "cases": golden_cases,
    }
    OUTPUT.write_text(json.dumps(golden, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    errors = sum("expected_error" in case for case in golden_cases)
    print(f"wrote {OUTPUT.relative_to(REPO)}: {len(golden_cases)} cases ({errors} expecting an error)")


# ---- unit test verification --------------------------------------------------------------------
RAW = r'R"j\((.*?)\)j"'
RENDER_CASE = re.compile(r'\{\s*"((?:[^"\\]|\\.)*)",\s*' + RAW + r",\s*" + RAW + r",\s*" + RAW + r"\s*\}", re.S)
ERROR_CASE = re.compile(r'\{\s*"((?:[^"\\]|\\.)*)",\s*' + RAW + r",\s*" + RAW + r',\s*"((?:[^"\\]|\\.)*)"\s*\}', re.S)


def table(source, name):
    start = source.index(name)
    return source[start:source.index("\n};", start)]


def check_unit_tests():
    """Re-derives every expectation in test_jinja.cpp's tables with jinja2."""
    env = make_environment()
    source = UNIT_TESTS.read_text(encoding="utf-8")
    failures = 0
    render_cases = RENDER_CASE.findall(table(source, "kRenderCases[]"))
    for name, template, context, expected in render_cases:
        try:
            actual = env.from_string(template).render(**json.loads(context))
        except Exception as error:  # noqa: BLE001 - report whatever jinja2 raised
            actual = f"<{type(error).__name__}: {error}>"
        if actual != expected:
            failures += 1
            print(f"MISMATCH {name}:\n  template {template!r}\n  jinja2   {actual!r}\n  expected {expected!r}")
    error_cases = ERROR_CASE.findall(table(source, "kErrorCases[]"))
    for name, template, context, _ in error_cases:
        try:
            env.from_string(template).render(**json.loads(context))
        except Exception:  # noqa: BLE001 - any jinja2 error confirms the case
            continue
        failures += 1
        print(f"NO ERROR {name}: jinja2 renders {template!r} without error")
    print(f"checked {len(render_cases)} render cases and {len(error_cases)} error cases: {failures} failure(s)")
    return failures == 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check-unit-tests", action="store_true", help="verify tests/cpp/jinja/test_jinja.cpp with jinja2")
    args = parser.parse_args()
    if args.check_unit_tests:
        sys.exit(0 if check_unit_tests() else 1)
    generate()


if __name__ == "__main__":
    main()
