"""Structured output through the OpenAI API (issue 23), with the official openai client against
`tqserve serve` (SmolLM2): 50 chat requests over 10 JSON schemas per KV mode (f16, tq4) all parse
and validate (the `jsonschema` package, not the engine, judges); a streamed answer reassembles to
the same text; vLLM's guided_choice / guided_regex / guided_grammar / structured_outputs and
llama.cpp's grammar and json_schema work on completions; json_object gives a JSON object; bad
schemas, regexes and grammars are 400s naming the field; logit_bias moves the choice."""
import concurrent.futures
import json
import re

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

from conftest import openai_client  # noqa: E402

ADDRESS = {"type": "object", "properties": {"street": {"type": "string", "maxLength": 30},
                                            "city": {"type": "string", "maxLength": 20}},
           "required": ["street", "city"], "additionalProperties": False}
SCHEMAS = {
    "person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                                "age": {"type": "integer", "minimum": 0, "maximum": 120}},
               "required": ["name", "age"], "additionalProperties": False},
    "color": {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
              "required": ["color"], "additionalProperties": False},
    "status": {"type": "object", "properties": {"version": {"const": 1}, "status": {"enum": ["ok", "error"]}},
               "required": ["version", "status"], "additionalProperties": False},
    "tags": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                                                       "minItems": 1, "maxItems": 3}},
             "required": ["tags"], "additionalProperties": False},
    "addresses": {"$defs": {"address": ADDRESS}, "type": "object",
                  "properties": {"home": {"$ref": "#/$defs/address"}, "work": {"$ref": "#/$defs/address"}},
                  "required": ["home", "work"], "additionalProperties": False},
    "weather": {"type": "object", "properties": {"temperature": {"type": "number", "minimum": -50, "maximum": 50},
                                                 "unit": {"enum": ["C", "F"]}},
                "required": ["temperature", "unit"], "additionalProperties": False},
    "task": {"type": "object", "properties": {"done": {"type": "boolean"},
                                              "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]}},
             "required": ["done", "note"], "additionalProperties": False},
    "order": {"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999},
                                         "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["id", "qty"], "additionalProperties": False}}},
              "required": ["items"], "additionalProperties": False},
    "code": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}},
             "required": ["code"], "additionalProperties": False},
    "letters": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 2, "maxItems": 4},
}
QUESTIONS = ["Describe it as JSON.", "Give an example.", "Answer in JSON, please.", "What would a typical one be?",
             "Make one up."]


@pytest.fixture
def server(smollm2_server_per_kv_mode):
    return smollm2_server_per_kv_mode


client_for = openai_client


def ask(client, name, question, index, stream=False):
    kwargs = dict(model="smollm2", messages=[{"role": "user", "content": f"A {name}. {question}"}], max_tokens=200,
                  response_format={"type": "json_schema",
                                   "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}},
                  temperature=0.7 if index % 2 else 0.0, seed=index)
    if not stream:
        choice = client.chat.completions.create(**kwargs).choices[0]
        return choice.message.content, choice.finish_reason
    text, finish = "", None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


def test_fifty_requests_over_ten_schemas_all_validate(server):
    client = client_for(server)
    jobs = [(name, q, i) for i, (name, q) in enumerate((n, q) for n in SCHEMAS for q in QUESTIONS)]
    assert len(jobs) == 50
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda j: ask(client, *j), jobs))
    bad = []
    for (name, _, _), (text, finish) in zip(jobs, answers):
        try:
            jsonschema.validate(json.loads(text), SCHEMAS[name])
            assert finish == "stop", finish
        except Exception as e:  # noqa: BLE001 - collected to report every failure at once
            bad.append((name, text, finish, repr(e)[:200]))
    assert not bad, bad
    # Properties come in the order the schema lists them (OpenAI's behaviour), not sorted.
    person = json.loads(answers[0][0])
    assert list(person) == ["name", "age"]


def test_streamed_answer_equals_the_whole_one(server):
    client = client_for(server)
    for name in ("addresses", "order"):
        whole = ask(client, name, QUESTIONS[0], 0)
        streamed = ask(client, name, QUESTIONS[0], 0, stream=True)
        assert streamed == whole
        jsonschema.validate(json.loads(streamed[0]), SCHEMAS[name])


def test_vllm_and_llama_cpp_fields_on_completions(server):
    client = client_for(server)

    def complete(**extra):
        out = client.completions.create(model="smollm2", prompt="The answer is", max_tokens=40, temperature=0,
                                        extra_body=extra)
        return out.choices[0].text, out.choices[0].finish_reason

    assert complete(guided_choice=["yes", "no", "perhaps"])[0] in ("yes", "no", "perhaps")
    text, finish = complete(guided_regex=r"\(\d{3}\) \d{3}-\d{4}")
    assert re.fullmatch(r"\(\d{3}\) \d{3}-\d{4}", text) and finish == "stop", text
    text, _ = complete(guided_grammar='root ::= "A" | "B" | "C" digit\ndigit ::= [0-9]')
    assert re.fullmatch(r"A|B|C[0-9]", text), text
    text, _ = complete(grammar='root ::= ("red" | "green") (", " ("red" | "green")){0,2}')
    assert re.fullmatch(r"(red|green)(, (red|green)){0,2}", text), text
    text, _ = complete(structured_outputs={"choice": ["alpha", "beta"]})
    assert text in ("alpha", "beta")
    text, _ = complete(json_schema=SCHEMAS["color"])
    jsonschema.validate(json.loads(text), SCHEMAS["color"])
    text, _ = complete(guided_json=json.dumps(SCHEMAS["status"]))
    jsonschema.validate(json.loads(text), SCHEMAS["status"])
    out = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Reply with a JSON object with a key ok set to true."}],
                                         max_tokens=100, temperature=0, response_format={"type": "json_object"})
    assert isinstance(json.loads(out.choices[0].message.content), dict)


@pytest.mark.parametrize("extra, field, words", [
    ({"guided_json": {"type": "strin"}}, "guided_json", "strin"),
    ({"guided_json": "{not json"}, "guided_json", "not valid JSON"),
    ({"guided_regex": "(a"}, "guided_regex", "not a valid regex"),
    ({"grammar": "root ::= ("}, "grammar", "not a valid grammar"),
    ({"guided_choice": []}, "guided_choice", "non-empty list"),
    ({"guided_regex": "a", "grammar": 'root ::= "a"'}, "grammar", "both constrain the output"),
    ({"response_format": {"type": "xml"}}, "response_format", "'xml' is not one of"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "needs a 'json_schema' object"),
    ({"structured_outputs": {"structural_tag": "x"}}, "structured_outputs.structural_tag", "not supported"),
])
def test_bad_constraints_are_400s_naming_the_field(server, extra, field, words):
    status, body = server.post("/v1/completions", {"prompt": "x", "max_tokens": 4, **extra})
    assert status == 400, body
    error = json.loads(body)["error"]
    assert error["param"] == field and words in error["message"], error
    assert ".cc:" not in error["message"]
    assert server.get("/health")[0] == 200


def test_logit_bias_forces_and_forbids_tokens(server):
    client = client_for(server)

    def ids(text):
        status, body = server.post("/tokenize", {"prompt": text, "add_special_tokens": False})
        assert status == 200, body
        return json.loads(body)["tokens"]

    prompt = "The capital of France is"
    (banana,) = ids(" banana")
    plain = client.completions.create(model="smollm2", prompt=prompt, max_tokens=3, temperature=0).choices[0].text
    forced = client.completions.create(model="smollm2", prompt=prompt, max_tokens=3, temperature=0,
                                       logit_bias={str(banana): 100}).choices[0].text
    assert forced == " banana" * 3 != plain
    greedy_first = ids(prompt + plain)[len(ids(prompt))]  # the greedy answer starts with a space: a clean cut
    other = client.completions.create(model="smollm2", prompt=prompt, max_tokens=1, temperature=0,
                                      logit_bias={str(greedy_first): -100}).choices[0].text
    status, body = server.post("/detokenize", {"tokens": [greedy_first]})
    assert other != json.loads(body)["prompt"]
