"""Tool calling through the chat API (issue 23), with the official openai client against
`tqserve serve` (SmolLM2, whose template knows no tools, so the server describes them in the system
message): tool_choice naming a function gives one call of it whose arguments validate against its
parameter schema (checked by `jsonschema`), in f16 and tq4; `required` gives valid calls of listed
tools; a streamed answer reassembles to the same text and calls; a later turn carrying the
assistant's tool_calls and a `tool` message is accepted and rendered into the prompt. Served with
Llama 3.2's template (`--chat-template`), required and named calls take Llama's bare JSON form
{"name", "parameters"} and come back as the same tool_calls."""
import concurrent.futures
import json

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from conftest import BINARY, TESTDATA, openai_client  # noqa: E402
from server_process import ServerProcess  # noqa: E402

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40},
                                                        "unit": {"enum": ["celsius", "fahrenheit"]}},
                       "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "search", "description": "Searches the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 60},
                                                        "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
                       "required": ["query"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTIONS = ["What is the weather in Paris?", "How much is 17 plus 25?", "Find me a recipe for pancakes.",
             "Is it cold in Oslo today?", "Add 3 and 4.", "Who won the world cup in 2018?", "Hello!",
             "Tell me about the moon.", "I need the temperature in Tokyo in fahrenheit.", "Sum of 100 and 250?"]


@pytest.fixture
def server(smollm2_server_per_kv_mode):
    return smollm2_server_per_kv_mode


client_for = openai_client


def call(client, question, tool_choice, index, stream=False):
    kwargs = dict(model="smollm2", messages=[{"role": "user", "content": question}], tools=TOOLS,
                  tool_choice=tool_choice, max_tokens=160, temperature=0.7 if index % 2 else 0.0, seed=index)
    if not stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        calls = [(c.id, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
        return choice.message.content, calls, choice.finish_reason
    content, parts, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            part = parts.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            part["id"] = tc.id or part["id"]
            if tc.function:
                part["name"] += tc.function.name or ""
                part["arguments"] += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    calls = [(p["id"], p["name"], p["arguments"]) for _, p in sorted(parts.items())]
    return content or None, calls, finish


def check_calls(calls, allowed):
    assert calls, "no tool call"
    for _, name, arguments in calls:
        assert name in allowed, name
        jsonschema.validate(json.loads(arguments), PARAMS[name])


def test_a_named_function_is_called_with_valid_arguments(server):
    client = client_for(server)
    jobs = [(q, t["function"]["name"], i) for i, (q, t) in enumerate((q, t) for q in QUESTIONS for t in TOOLS)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(
            lambda j: call(client, j[0], {"type": "function", "function": {"name": j[1]}}, j[2]), jobs))
    bad = []
    for (question, name, _), (content, calls, finish) in zip(jobs, answers):
        try:
            assert len(calls) == 1 and finish == "tool_calls" and content is None, (content, calls, finish)
            check_calls(calls, {name})
        except Exception as e:  # noqa: BLE001 - every failure reported at once
            bad.append((question, name, content, calls, finish, repr(e)[:200]))
    assert not bad, bad
    assert len(answers) == 30


def test_required_calls_listed_tools_validly(server):
    client = client_for(server)
    for i, question in enumerate(QUESTIONS[:5]):
        content, calls, finish = call(client, question, "required", i)
        assert finish in ("tool_calls", "length"), finish
        complete = calls if finish == "tool_calls" else calls[:-1]  # a call cut by max_tokens is text
        check_calls(complete or calls, set(PARAMS))


def test_streamed_calls_reassemble_to_the_whole_answer(server):
    client = client_for(server)
    for i, (question, choice) in enumerate([(QUESTIONS[0], {"type": "function", "function": {"name": "get_weather"}}),
                                            (QUESTIONS[1], "required"), (QUESTIONS[6], "auto")]):
        whole = call(client, question, choice, 2 * i)
        streamed = call(client, question, choice, 2 * i, stream=True)
        drop_ids = lambda answer: (answer[0], [c[1:] for c in answer[1]], answer[2])  # noqa: E731
        assert drop_ids(streamed) == drop_ids(whole)  # ids are per response
        ids = [c[0] for c in streamed[1]]
        assert all(i and i.startswith("call_") for i in ids) and len(set(ids)) == len(ids)


def test_a_later_turn_with_tool_results_is_rendered(server):
    history = [{"role": "user", "content": "What is the weather in Paris?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]},
               {"role": "tool", "tool_call_id": "call_1", "content": "21 degrees and sunny"}]
    status, body = server.post("/tokenize", {"messages": history, "tools": TOOLS})
    assert status == 200, body
    status, text = server.post("/detokenize", {"tokens": json.loads(body)["tokens"]})
    prompt = json.loads(text)["prompt"]
    assert "21 degrees and sunny" in prompt and "<tool_call>" in prompt and "get_weather" in prompt
    assert "Searches the web" in prompt  # the tools are described
    out = client_for(server).chat.completions.create(model="smollm2", messages=history, tools=TOOLS, max_tokens=30,
                                                     temperature=0)
    assert out.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("extra, field, words", [
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools", "needs a 'name'"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "fly"}}}, "tool_choice",
     "names the function 'fly'"),
    ({"tool_choice": "required"}, "tool_choice", "'tools' lists none"),
    ({"tools": TOOLS, "tool_choice": "required", "guided_regex": "a"}, "tool_choice", "give one"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "strin"}}}],
      "tool_choice": "required"}, "tools", "not a valid tool call schema"),
])
def test_bad_tools_are_400s_naming_the_field(server, extra, field, words):
    status, body = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], **extra})
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["param"] == field and words in error["message"], error


LLAMA_TEMPLATE = TESTDATA / "llama.cpp-vocab" / "templates" / "meta-llama-Llama-3.2-3B-Instruct.jinja"


@pytest.fixture(scope="module")
def llama_template_server(smollm2):
    if not LLAMA_TEMPLATE.exists():
        pytest.skip("needs the shared test data (Llama 3.2's chat template)")
    s = ServerProcess(BINARY, smollm2, "--served-model-name", "smollm2", "--chat-template", LLAMA_TEMPLATE,
                      "--kv-cache-memory", "128MiB", "--max-model-len", "4096")
    yield s
    s.stop()


def test_llama_templates_get_calls_in_their_own_bare_json_form(llama_template_server):
    client = client_for(llama_template_server)
    for i, (question, tool) in enumerate([(QUESTIONS[0], TOOLS[0]), (QUESTIONS[1], TOOLS[1]), (QUESTIONS[2], TOOLS[2])]):
        name = tool["function"]["name"]
        choice = {"type": "function", "function": {"name": name}}
        content, calls, finish = call(client, question, choice, i)
        assert len(calls) == 1 and finish == "tool_calls" and content is None, (content, calls, finish)
        check_calls(calls, {name})
        # The prompt carries the template's own instructions for that form.
        status, body = llama_template_server.post("/tokenize", {"messages": [{"role": "user", "content": question}],
                                                                "tools": TOOLS})
        assert status == 200, body
        status, text = llama_template_server.post("/detokenize", {"tokens": json.loads(body)["tokens"]})
        assert '"parameters": dictionary of argument name' in json.loads(text)["prompt"]
        streamed = call(client, question, choice, i, stream=True)
        assert (streamed[0], [c[1:] for c in streamed[1]], streamed[2]) == (content, [c[1:] for c in calls], finish)
    content, calls, finish = call(client, QUESTIONS[3], "required", 7)
    assert finish == "tool_calls" and len(calls) == 1, (content, calls, finish)  # one call: the form holds one
    check_calls(calls, set(PARAMS))
