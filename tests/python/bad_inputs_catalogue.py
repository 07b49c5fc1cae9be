"""The bad-input catalogue of `tqserve serve`: each row is one bad request, the HTTP status and the
OpenAI error (type, param, code, message excerpt) the server must answer with.

One data source for two readers: tests/python/test_bad_inputs.py sends every row, and
`python3 tests/python/bad_inputs_catalogue.py` prints the Markdown table of docs/BAD_INPUTS.md
(`--write` rewrites the table there; the test fails when the document is out of date).

A row's request is one of:
  json=...            POST (or `method`) with that JSON body
  raw=b"..."          that body as bytes (Content-Type application/json unless `content_type`)
  http=b"..."         the whole HTTP request, written to a socket as is
  special="name"      a scenario the test runs itself (slow client, too many connections)
`server` is "main" (default flags) or "limits" (--api-key, --max-connections 2,
--request-timeout 2, --max-tokens-limit 64); `auth` adds the limits server's key.
"""
import json
import re
import sys
from pathlib import Path

C = "/v1/completions"
CH = "/v1/chat/completions"
MSG = [{"role": "user", "content": "Hi"}]
API_KEY = "sekret"
LIMITS_FLAGS = ["--api-key", API_KEY, "--max-connections", "2", "--request-timeout", "2", "--max-tokens-limit", "64"]

BAD = "invalid_request_error"


def row(case, status, type_, message, *, param=None, code=None, path=C, server="main", **request):
    return dict(case=case, status=status, type=type_, message=message, param=param, code=code, path=path,
                server=server, **request)


def _http(request_line, headers=(), body=b""):
    head = request_line + "\r\nHost: x\r\n" + "".join(f"{h}\r\n" for h in headers) + "\r\n"
    return head.encode() + body


BIG_BODY = b'{"prompt": "' + b"a" * (9 << 20) + b'"}'
CHUNKED_BIG = _http("POST /v1/completions HTTP/1.1", ["Content-Type: application/json", "Transfer-Encoding: chunked"],
                    b"".join(b"10000\r\n" + b"a" * 0x10000 + b"\r\n" for _ in range(160)) + b"0\r\n\r\n")

CATALOGUE = [
    # --- the body is not a JSON object -----------------------------------------------------------
    row("malformed JSON", 400, BAD, "not valid JSON: parse error at line 1, column 3", raw=b"{not json"),
    row("JSON that is not an object", 400, BAD, "must be a JSON object, not array", raw=b'[1, 2]'),
    row("empty body", 400, BAD, "the request body is empty", raw=b""),
    row("trailing garbage after the object", 400, BAD, "not valid JSON", raw=b'{"prompt": "x"} xyz'),
    row("NaN is not JSON", 400, BAD, "not valid JSON", raw=b'{"prompt": "x", "temperature": NaN}'),
    row("invalid UTF-8 in the body", 400, BAD, "ill-formed UTF-8", raw=b'{"prompt": "\xff\xfe abc"}'),
    row("lone surrogate escape \\ud800", 400, BAD, "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF",
        raw=b'{"prompt": "\\ud800 abc"}'),
    row("lone low surrogate \\udc00 in a chat message", 400, BAD, "surrogate", path=CH,
        raw=b'{"messages": [{"role": "user", "content": "\\udc00"}]}'),
    row("wrong Content-Type (text/plain)", 400, BAD, "Content-Type 'text/plain' is not supported",
        json={"prompt": "x"}, content_type="text/plain"),
    row("form Content-Type (curl -d without -H)", 400, BAD, "'application/x-www-form-urlencoded' is not supported",
        raw=b"prompt=x", content_type="application/x-www-form-urlencoded"),
    # --- HTTP framing and limits -------------------------------------------------------------------
    row("body over --max-request-body (9 MiB)", 413, BAD, "exceeds 8388608 bytes (--max-request-body)",
        raw=BIG_BODY, show="POST /v1/completions with a 9 MiB JSON body"),
    row("chunked body over the limit (10 MiB)", 413, BAD, "exceeds 8388608 bytes",
        http=CHUNKED_BIG, show="POST /v1/completions, Transfer-Encoding: chunked, 10 MiB"),
    row("absurd Content-Length answered at once", 413, BAD, "--max-request-body",
        http=_http("POST /v1/completions HTTP/1.1", ["Content-Length: 1000000000000000"], b"{}"),
        show="POST /v1/completions, Content-Length: 10^15, 2 bytes sent"),
    row("one header line over 8192 bytes", 431, BAD, "header line is longer than 8192 bytes", method="GET",
        path="/v1/models", headers={"X-Big": "a" * 9000}),
    row("headers over --max-header-bytes (500 x 100 bytes)", 431, BAD, "exceed 32768 bytes (--max-header-bytes)",
        method="GET", path="/v1/models", headers={f"X-H{i}": "a" * 100 for i in range(500)}),
    row("request URI over 8192 bytes", 414, BAD, "URI is longer than 8192 bytes", method="GET",
        path="/v1/models?" + "a" * 9000, show="GET /v1/models?aaaa... (9000 bytes)"),
    row("garbage request line", 400, BAD, "malformed HTTP request line or headers", http=b"HELLO\r\n\r\n"),
    row("body shorter than its Content-Length", 408, BAD, "did not arrive within 2 seconds", server="limits",
        http=_http("POST /v1/completions HTTP/1.1", ["Content-Length: 100", f"Authorization: Bearer {API_KEY}"],
                   b'{"prompt"'), show="POST /v1/completions, Content-Length: 100, 9 bytes sent, then silence"),
    # --- routes ----------------------------------------------------------------------------------------
    row("unknown path", 404, "not_found_error", "no route GET /v1/nothing", method="GET", path="/v1/nothing"),
    row("wrong method on a known path", 405, BAD, "method GET is not allowed on /v1/completions (use POST)",
        method="GET"),
    row("DELETE /v1/models", 405, BAD, "method DELETE is not allowed", method="DELETE", path="/v1/models"),
    # --- model -----------------------------------------------------------------------------------------
    row("unknown model name", 404, "not_found_error", "The model `gpt-4` does not exist", param="model",
        code="model_not_found", json={"model": "gpt-4", "prompt": "x"}),
    row("model is not a string", 400, BAD, "'model' must be a string", param="model", json={"model": 3, "prompt": "x"}),
    # --- completions: prompt -------------------------------------------------------------------------
    row("missing prompt", 400, BAD, "'prompt' is required", param="prompt", json={"max_tokens": 3}),
    row("prompt of the wrong type", 400, BAD, "'prompt' must be a string, a list of token ids", param="prompt",
        json={"prompt": 5}),
    row("empty prompt", 400, BAD, "the prompt is empty", param="prompt", json={"prompt": ""}),
    row("empty prompt list", 400, BAD, "'prompt' must be a string, a list of token ids", param="prompt",
        json={"prompt": []}),
    row("token id outside the vocabulary", 400, BAD, "token id 10000000 is outside the vocabulary (0..49151)",
        param="prompt", json={"prompt": [1, 2, 10**7]}),
    row("negative token id", 400, BAD, "token id -1 is outside the vocabulary", param="prompt", json={"prompt": [-1]}),
    row("fractional token id", 400, BAD, "token lists must hold integers", param="prompt", json={"prompt": [1.5]}),
    row("prompt over the context length", 400, BAD, "maximum context length is 2048 tokens. However, your prompt has 2100",
        param="prompt", json={"prompt": list(range(100, 2200))}, show='POST /v1/completions {"prompt": [2100 token ids]}'),
    row("more than 64 prompts", 400, BAD, "65 prompts in one request, at most 64", param="prompt",
        json={"prompt": ["a"] * 65}),
    # --- chat: messages --------------------------------------------------------------------------------
    row("missing messages", 400, BAD, "'messages' is required", param="messages", path=CH, json={"max_tokens": 3}),
    row("empty messages", 400, BAD, "'messages' must be a non-empty list", param="messages", path=CH,
        json={"messages": []}),
    row("messages not a list", 400, BAD, "'messages' must be a non-empty list", param="messages", path=CH,
        json={"messages": "hi"}),
    row("message not an object", 400, BAD, "messages[0] must be an object", param="messages", path=CH,
        json={"messages": ["hi"]}),
    row("unknown role", 400, BAD, "messages[0] has role 'wizard'", param="messages", path=CH,
        json={"messages": [{"role": "wizard", "content": "hi"}]}),
    row("message without content", 400, BAD, "messages[0] (role 'user') has no 'content'", param="messages", path=CH,
        json={"messages": [{"role": "user"}]}),
    row("content of the wrong type", 400, BAD, "messages[0] 'content' must be a string or a list of text parts",
        param="messages", path=CH, json={"messages": [{"role": "user", "content": 5}]}),
    row("image content part", 400, BAD, "only text content parts are supported", param="messages", path=CH,
        json={"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
    row("content part with a numeric type", 400, BAD, "only text content parts are supported", param="messages",
        path=CH, json={"messages": [{"role": "user", "content": [{"type": 1, "text": "a"}]}]}),
    # --- max_tokens ------------------------------------------------------------------------------------
    row("max_tokens 0", 400, BAD, "'max_tokens' must be between 1 and", param="max_tokens",
        json={"prompt": "x", "max_tokens": 0}),
    row("negative max_tokens", 400, BAD, "'max_tokens' must be between 1 and", param="max_tokens",
        json={"prompt": "x", "max_tokens": -1}),
    row("huge max_tokens (10^12)", 400, BAD, "'max_tokens' must be between 1 and 2147483647", param="max_tokens",
        json={"prompt": "x", "max_tokens": 10**12}),
    row("max_tokens not an integer", 400, BAD, "'max_tokens' must be an integer, not a fraction", param="max_tokens",
        json={"prompt": "x", "max_tokens": 1.5}),
    row("max_tokens a string", 400, BAD, "'max_tokens' must be an integer, not string", param="max_tokens",
        json={"prompt": "x", "max_tokens": "ten"}),
    row("prompt + max_tokens over the context", 400, BAD, "maximum context length is 2048 tokens. However, you requested",
        param="max_tokens", json={"prompt": "hi", "max_tokens": 2048}),
    row("negative max_completion_tokens", 400, BAD, "'max_completion_tokens' must be between 1", path=CH,
        param="max_completion_tokens", json={"messages": MSG, "max_completion_tokens": -5}),
    row("max_tokens over --max-tokens-limit", 400, BAD, "at most 64 tokens per completion (--max-tokens-limit)",
        param="max_tokens", server="limits", auth=True, json={"prompt": "x", "max_tokens": 100}),
    # --- sampling parameters ------------------------------------------------------------------------------
    row("n = 0", 400, BAD, "'n' must be between 1 and 16", param="n", json={"prompt": "x", "n": 0}),
    row("n too large", 400, BAD, "'n' must be between 1 and 16, got 1000", param="n", json={"prompt": "x", "n": 1000}),
    row("negative temperature", 400, BAD, "'temperature' must be between 0 and 2", param="temperature",
        json={"prompt": "x", "temperature": -1}),
    row("temperature too high", 400, BAD, "'temperature' must be between 0 and 2, got 5", param="temperature",
        json={"prompt": "x", "temperature": 5}),
    row("temperature a string", 400, BAD, "'temperature' must be a number, not string", param="temperature",
        json={"prompt": "x", "temperature": "hot"}),
    row("top_p = 0", 400, BAD, "'top_p' must be greater than 0", param="top_p", json={"prompt": "x", "top_p": 0}),
    row("top_p > 1", 400, BAD, "'top_p' must be between 0 and 1", param="top_p", json={"prompt": "x", "top_p": 1.5}),
    row("top_k < -1", 400, BAD, "'top_k' must be between -1 and", param="top_k", json={"prompt": "x", "top_k": -2}),
    row("min_p > 1", 400, BAD, "'min_p' must be between 0 and 1", param="min_p", json={"prompt": "x", "min_p": 2}),
    row("presence_penalty > 2", 400, BAD, "'presence_penalty' must be between -2 and 2", param="presence_penalty",
        json={"prompt": "x", "presence_penalty": 3}),
    row("frequency_penalty < -2", 400, BAD, "'frequency_penalty' must be between -2 and 2", param="frequency_penalty",
        json={"prompt": "x", "frequency_penalty": -3}),
    row("repetition_penalty 0", 400, BAD, "'repetition_penalty' must be between", param="repetition_penalty",
        json={"prompt": "x", "repetition_penalty": 0}),
    row("logprobs > 20 (completions)", 400, BAD, "'logprobs' must be between 0 and 20", param="logprobs",
        json={"prompt": "x", "logprobs": 21}),
    row("logprobs a boolean (completions)", 400, BAD, "'logprobs' must be an integer, not boolean", param="logprobs",
        json={"prompt": "x", "logprobs": True}),
    row("top_logprobs > 20 (chat)", 400, BAD, "'top_logprobs' must be between 0 and 20", param="top_logprobs",
        path=CH, json={"messages": MSG, "logprobs": True, "top_logprobs": 21}),
    row("top_logprobs without logprobs", 400, BAD, "'top_logprobs' needs 'logprobs': true", param="top_logprobs",
        path=CH, json={"messages": MSG, "top_logprobs": 2}),
    row("too many stop strings", 400, BAD, "'stop' has 17 strings, at most 16", param="stop",
        json={"prompt": "x", "stop": ["a"] * 17}),
    row("stop string too long", 400, BAD, "a 'stop' string has 2000 bytes, at most 1024", param="stop",
        json={"prompt": "x", "stop": ["a" * 2000]}, show='POST /v1/completions {"prompt": "x", "stop": ["aaa...(2000 bytes)"]}'),
    row("stop not a string or list", 400, BAD, "'stop' must be a string or a list of strings", param="stop",
        json={"prompt": "x", "stop": 5}),
    row("empty stop string", 400, BAD, "'stop' strings must not be empty", param="stop", json={"prompt": "x", "stop": ""}),
    row("stop_token_ids outside the vocabulary (2^40)", 400, BAD, "token id 1099511627776 is outside the vocabulary",
        param="stop_token_ids", json={"prompt": "x", "stop_token_ids": [2**40]}),
    row("seed a string", 400, BAD, "'seed' must be an integer, not string", param="seed",
        json={"prompt": "x", "seed": "abc"}),
    row("seed a fraction", 400, BAD, "'seed' must be an integer, not a fraction", param="seed",
        json={"prompt": "x", "seed": 1.5}),
    row("stream not a boolean", 400, BAD, "'stream' must be a boolean, not string", param="stream",
        json={"prompt": "x", "stream": "yes"}),
    row("stream_options without stream", 400, BAD, "'stream_options' is only allowed with 'stream': true",
        param="stream_options", json={"prompt": "x", "stream_options": {"include_usage": True}}),
    row("echo not a boolean", 400, BAD, "'echo' must be a boolean", param="echo", json={"prompt": "x", "echo": 1}),
    # --- features tqserve does not implement --------------------------------------------------------
    row("functions (the deprecated form of tools)", 400, BAD, "'functions' is not supported by this server",
        param="functions", path=CH, json={"messages": MSG, "functions": [{"name": "f"}]}),
    row("logit_bias key not a token id", 400, BAD, "'logit_bias' key 'abc' is not a token id of this model",
        param="logit_bias", json={"prompt": "x", "logit_bias": {"abc": 1}}),
    row("logit_bias beyond 100", 400, BAD, "'logit_bias' value for token 50 must be a number in [-100, 100], got 101",
        param="logit_bias", json={"prompt": "x", "logit_bias": {"50": 101}}),
    row("suffix", 400, BAD, "'suffix' is not supported", param="suffix", json={"prompt": "x", "suffix": "y"}),
    row("best_of < n", 400, BAD, "'best_of' must be an integer at least 'n' (3)", param="best_of",
        json={"prompt": "x", "n": 3, "best_of": 2}),
    row("best_of > n streamed", 400, BAD, "'best_of' greater than 'n' cannot be streamed", param="best_of",
        json={"prompt": "x", "best_of": 3, "stream": True}),
    # --- tools ----------------------------------------------------------------------------------------
    row("tool with a bad name", 400, BAD, "tools[0] function needs a 'name' of 1 to 64 letters", param="tools", path=CH,
        json={"messages": MSG, "tools": [{"type": "function", "function": {"name": "a b"}}]}),
    row("tool_choice naming an unlisted function", 400, BAD, "names the function 'fly', which 'tools' does not list",
        param="tool_choice", path=CH, json={"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
                                            "tool_choice": {"type": "function", "function": {"name": "fly"}}}),
    row("tool_choice required without tools", 400, BAD, "'tool_choice' asks for a tool call but 'tools' lists none",
        param="tool_choice", path=CH, json={"messages": MSG, "tool_choice": "required"}),
    # --- structured output (response_format, vLLM's guided_* / structured_outputs, llama.cpp's grammar) --
    row("response_format of an unknown type", 400, BAD, "response_format type 'xml' is not one of 'text', 'json_object', "
        "'json_schema'", param="response_format", path=CH, json={"messages": MSG, "response_format": {"type": "xml"}}),
    row("response_format json_schema without its object", 400, BAD, "needs a 'json_schema' object",
        param="response_format.json_schema", path=CH, json={"messages": MSG, "response_format": {"type": "json_schema"}}),
    row("JSON schema with an unknown type", 400, BAD, "'guided_json' is not a valid json_schema", param="guided_json",
        json={"prompt": "x", "guided_json": {"type": "strin"}}),
    row("JSON schema that is not JSON", 400, BAD, "'guided_json' is not valid JSON", param="guided_json",
        json={"prompt": "x", "guided_json": "{not json"}),
    row("regex with an unclosed group", 400, BAD, "'guided_regex' is not a valid regex", param="guided_regex",
        json={"prompt": "x", "guided_regex": "(a"}),
    row("grammar that does not parse", 400, BAD, "'grammar' is not a valid grammar", param="grammar",
        json={"prompt": "x", "grammar": "root ::= ("}),
    row("guided_choice empty", 400, BAD, "'guided_choice' must be a non-empty list of strings", param="guided_choice",
        json={"prompt": "x", "guided_choice": []}),
    row("two output constraints", 400, BAD, "'guided_regex' and 'grammar' both constrain the output: give one",
        param="grammar", json={"prompt": "x", "guided_regex": "a", "grammar": "root ::= \"a\""}),
    # --- tokenizer endpoints ---------------------------------------------------------------------------
    row("/tokenize prompt of the wrong type", 400, BAD, "'prompt' must be a string", param="prompt", path="/tokenize",
        json={"prompt": 5}),
    row("/tokenize add_special_tokens not a boolean", 400, BAD, "'add_special_tokens' must be a boolean",
        param="add_special_tokens", path="/tokenize", json={"prompt": "x", "add_special_tokens": "no"}),
    row("/detokenize id outside the vocabulary", 400, BAD, "is outside the vocabulary", param="tokens",
        path="/detokenize", json={"tokens": [1, 10**7]}),
    # --- authentication (--api-key) -------------------------------------------------------------------
    row("missing API key", 401, "authentication_error", "missing API key", server="limits", json={"prompt": "x"}),
    row("wrong API key", 401, "authentication_error", "invalid API key", server="limits",
        headers={"Authorization": "Bearer wrong"}, json={"prompt": "x"}),
    row("Basic instead of Bearer", 401, "authentication_error", "invalid API key", server="limits",
        headers={"Authorization": "Basic c2VrcmV0"}, method="GET", path="/v1/models"),
    # --- connections --------------------------------------------------------------------------------------
    row("slow client that never finishes its body", 408, BAD, "did not arrive within 2 seconds (--request-timeout)",
        server="limits", special="slow_body",
        show="headers + half the body, then silence; other clients are served meanwhile; then closed"),
    row("too many connections (--max-connections 2)", 503, "server_overloaded", "too many connections",
        server="limits", special="too_many_connections", show="a third connection while 2 are open"),
]


def request_text(r):
    """The request column of the document."""
    if "show" in r:
        return r["show"]
    if "http" in r:
        what = repr(r["http"][:60])[2:-1]
    elif "raw" in r:
        what = repr(r["raw"])[2:-1]
    elif "json" in r:
        what = json.dumps(r["json"])
    else:
        what = ""
    if "http" in r:
        return what
    if "special" not in r:
        method = r.get("method", "POST")
        what = f"{method} {r['path']} {what}".strip()
        if r.get("content_type"):
            what += f" (Content-Type: {r['content_type']})"
        if r.get("headers") and "show" not in r and len(json.dumps(r["headers"])) < 60:
            what += " " + ", ".join(f"{k}: {v}" for k, v in r["headers"].items())
        elif r.get("headers") and "show" not in r:
            what += f" + {len(r['headers'])} header(s) totalling {sum(len(k) + len(v) for k, v in r['headers'].items())} bytes"
    if len(what) > 110:
        what = what[:107] + "..."
    return what


def markdown_table():
    def cell(s):
        return str(s).replace("|", "\\|").replace("\n", " ")

    lines = ["| # | case | request | status | error type | param / code | message contains |",
             "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(CATALOGUE, 1):
        pc = " / ".join(x for x in (r["param"], r["code"]) if x) or "-"
        srv = " (limits server)" if r["server"] == "limits" else ""
        lines.append(f"| {i} | {cell(r['case'])}{srv} | `{cell(request_text(r))}` | {r['status']} | {r['type']} | "
                     f"{cell(pc)} | {cell(r['message'])} |")
    return "\n".join(lines) + "\n"


DOC = Path(__file__).resolve().parents[2] / "docs" / "BAD_INPUTS.md"
BEGIN, END = "<!-- catalogue:begin -->\n", "<!-- catalogue:end -->"


def doc_table():
    text = DOC.read_text()
    m = re.search(re.escape(BEGIN) + "(.*?)" + re.escape(END), text, re.S)
    return m.group(1) if m else None


if __name__ == "__main__":
    if "--write" in sys.argv:
        text = DOC.read_text()
        start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
        DOC.write_text(text[:start] + markdown_table() + text[end:])
        print(f"{DOC}: {len(CATALOGUE)} rows")
    else:
        sys.stdout.write(markdown_table())
