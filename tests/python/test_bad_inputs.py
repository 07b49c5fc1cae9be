"""Every row of the bad-input catalogue (tests/python/bad_inputs_catalogue.py, docs/BAD_INPUTS.md)
against a running `tqserve serve`: the HTTP status and the OpenAI error object. Two servers: the
default flags, and one with an API key and small connection/timeout/max-tokens limits. After the
bad requests each server is still up, answers a normal request exactly as before, and holds no
KV blocks. A few rows are also sent through the official openai client, which must raise the
matching exception."""
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

from bad_inputs_catalogue import API_KEY, CATALOGUE, LIMITS_FLAGS, doc_table, markdown_table
from conftest import BINARY
from server_process import ServerProcess

COMMON = ["--kv-cache-memory", "48MiB", "--max-model-len", "2048", "--served-model-name", "smollm2"]
GOOD = {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def servers(smollm2):
    started = {}
    try:
        started["main"] = ServerProcess(BINARY, smollm2, *COMMON)
        started["limits"] = ServerProcess(BINARY, smollm2, *COMMON, *LIMITS_FLAGS)
        for name, s in started.items():
            headers = {"Authorization": f"Bearer {API_KEY}"} if name == "limits" else None
            status, body = s.post("/v1/completions", GOOD, headers=headers)
            assert status == 200, body
            s.good_text = json.loads(body)["choices"][0]["text"]
            s.headers = headers
        yield started
    finally:
        codes = {name: s.stop() for name, s in started.items()}  # stop every one before asserting
        for name, s in started.items():
            assert codes[name] == 0, "".join(s.log)


def _raw_http(port, data, timeout=30):
    """Writes `data` to a fresh connection; returns (status, body) of the response (0 if none)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered before reading everything: the answer is still there
        out = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, body = out.split(b"\r\n\r\n", 1)
                lengths = [int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")]
                if lengths and len(body) >= lengths[0]:
                    break
    finally:
        sock.close()
    if not out.startswith(b"HTTP/1.1 "):
        return 0, out.decode(errors="replace")
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace")


def _send(server, r):
    if "http" in r:
        return _raw_http(server.port, r["http"])
    headers = dict(r.get("headers") or {})
    if r.get("auth"):
        headers["Authorization"] = f"Bearer {API_KEY}"
    data = r["raw"] if "raw" in r else (json.dumps(r["json"]).encode() if "json" in r else None)
    req = urllib.request.Request(server.url + r["path"], data=data, method=r.get("method", "POST"), headers=headers)
    if data is not None:
        req.add_header("Content-Type", r.get("content_type", "application/json"))
    try:
        with urllib.request.urlopen(req, timeout=60) as f:
            return f.status, f.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError) as e:
        return 0, repr(e)


def _slow_body(server):
    """Headers and half a body, then silence: 408 after --request-timeout (2 s) and the connection
    closes; meanwhile another client is served at once."""
    body = json.dumps({"prompt": "x", "max_tokens": 2}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                 + body[: len(body) // 2])
    t0 = time.time()
    # Not blocked by the slow one: a one-token request is answered while the slow connection is
    # still open and unanswered (its 408 comes only after the 2 s timeout).
    status, text = server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1}, headers=server.headers, timeout=10)
    assert status == 200, (status, text)
    sock.setblocking(False)
    try:
        early = sock.recv(1)
        assert False, f"the slow connection was answered before the other request: {early!r}"
    except BlockingIOError:
        pass
    sock.settimeout(30)
    out = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break  # closed by the server
        out += chunk
    sock.close()
    # Not before the timeout; the upper bound only says it came (a hung server fails recv's 30 s),
    # so a loaded machine under ASan cannot miss it.
    assert 1.5 < time.time() - t0 < 25, time.time() - t0
    head, _, rest = out.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest.decode()


def _too_many_connections(server):
    """Two idle connections fill --max-connections 2: a third gets 503 (after a 250 ms grace); once they close,
    requests are served again."""
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    try:
        deadline = time.time() + 5
        while True:  # the two must have reached their worker threads first
            status, text = server.get("/v1/models", headers=server.headers, timeout=10)
            if status == 503 or time.time() > deadline:
                break
            time.sleep(0.05)
    finally:
        for s in idle:
            s.close()
    deadline = time.time() + 10
    while server.get("/health")[0] != 200 and time.time() < deadline:
        time.sleep(0.05)
    assert server.get("/health")[0] == 200
    return status, text


SPECIAL = {"slow_body": _slow_body, "too_many_connections": _too_many_connections}


def _id(r):
    return r["case"].replace(" ", "_")[:60]


MAIN = [r for r in CATALOGUE if r["server"] == "main"]
LIMITS = [r for r in CATALOGUE if r["server"] == "limits"]


def _check(server, r):
    status, text = SPECIAL[r["special"]](server) if "special" in r else _send(server, r)
    assert status == r["status"], f"{r['case']}: got {status}: {text[:300]}"
    err = json.loads(text)["error"]
    assert err["type"] == r["type"], err
    assert r["message"] in err["message"], err
    assert err["param"] == r["param"], err
    assert err["code"] == (r["code"] or r["status"]), err


@pytest.mark.parametrize("r", MAIN, ids=_id)
def test_main_server(servers, r):
    _check(servers["main"], r)


@pytest.mark.parametrize("r", LIMITS, ids=_id)
def test_limits_server(servers, r):
    _check(servers["limits"], r)


def test_missing_content_type_is_json(servers):
    # curl -H '' / clients that send no Content-Type: the body is read as JSON (as vLLM does).
    conn = http.client.HTTPConnection("127.0.0.1", servers["main"].port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(GOOD).encode())  # no Content-Type header
    r = conn.getresponse()
    text = r.read().decode()
    conn.close()
    assert r.status == 200 and json.loads(text)["choices"][0]["text"] == servers["main"].good_text


def test_openai_client_raises_the_matching_exceptions(servers):
    client = openai.OpenAI(base_url=servers["main"].url + "/v1", api_key="x", max_retries=0, timeout=60)
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4", prompt="x")
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="tools"):
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "x"}],
                                       tools=[{"type": "function", "function": {"name": "a b", "parameters": {}}}])
    with pytest.raises(openai.BadRequestError, match="wizard"):
        client.chat.completions.create(model="smollm2", messages=[{"role": "wizard", "content": "x"}])
    client.close()
    # Closed at once: an httpx client left to the garbage collector keeps its idle keep-alive
    # connection, which holds one of the limits server's two --max-connections slots.
    with openai.OpenAI(base_url=servers["limits"].url + "/v1", api_key="wrong", max_retries=0,
                       timeout=60) as limited:
        with pytest.raises(openai.AuthenticationError):
            limited.models.list()


@pytest.mark.parametrize("name", ["main", "limits"])
def test_server_survives_the_catalogue(servers, name):
    s = servers[name]
    assert s.proc.poll() is None and s.get("/health")[0] == 200
    status, body = s.post("/v1/completions", GOOD, headers=s.headers)
    assert status == 200 and json.loads(body)["choices"][0]["text"] == s.good_text
    m = s.wait_idle()
    assert m["tqserve:kv_cache_blocks_in_use"] == 0
    assert m["tqserve:num_requests_running"] == 0 and m["tqserve:num_requests_waiting"] == 0


def test_catalogue_is_documented():
    assert len(CATALOGUE) >= 35
    assert doc_table() == markdown_table(), "docs/BAD_INPUTS.md is stale: python3 tests/python/bad_inputs_catalogue.py --write"
