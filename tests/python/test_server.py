"""`tqserve serve` through real clients: the official openai package (chat and completions, streaming
and not, errors as the matching exception types), raw HTTP for what the SDK hides (status codes,
SSE framing, metrics), 64 concurrent streams equal to each request run alone, disconnects that free
their blocks, in an f16 and a tq4 cache."""
import concurrent.futures
import json
import socket
import time

import openai
import pytest

from conftest import BINARY
from server_process import ServerProcess

MODES = ["f16", "tq4"]


@pytest.fixture(scope="module", params=MODES)
def server(request, smollm2):
    s = ServerProcess(BINARY, smollm2, "--kv-cache-dtype", request.param, "--kv-cache-memory", "96MiB",
                      "--max-model-len", "2048", "--served-model-name", "smollm2")
    s.mode = request.param
    yield s
    assert s.stop() == 0, "".join(s.log)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def test_models_reports_the_kv_mode(server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["smollm2"]
    _, body = server.get("/v1/models")
    entry = json.loads(body)["data"][0]
    assert entry["kv_cache_dtype"] == server.mode and entry["max_model_len"] == 2048
    # The whole layout: a quantized mode names its row formats and its full-precision windows.
    if server.mode == "tq4":
        assert entry["kv_cache"] == "tq4 (tq4p), full-precision windows: sink 4, recent 24, q8_0"
    else:
        assert entry["kv_cache"] == server.mode


def test_chat_completion_and_its_stream_agree(client):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    full = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=24, temperature=0)
    assert full.object == "chat.completion"
    assert full.choices[0].message.role == "assistant"
    assert full.choices[0].finish_reason in ("stop", "length")
    assert full.usage.completion_tokens > 0 and full.usage.prompt_tokens > 10
    text = full.choices[0].message.content
    assert len(text.strip()) > 10  # the words depend on the arithmetic: see tests/python/test_cli.py

    pieces, usage, finish = [], None, None
    for chunk in client.chat.completions.create(model="smollm2", messages=messages, max_tokens=24, temperature=0,
                                                stream=True, stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for c in chunk.choices:
            pieces.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert "".join(pieces) == text
    assert finish == full.choices[0].finish_reason
    assert usage.completion_tokens == full.usage.completion_tokens


def test_completion_stream_n_and_stop(client):
    full = client.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=20, temperature=0)
    assert full.object == "text_completion" and full.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="smollm2", prompt="Once upon a time", max_tokens=20, temperature=0, stream=True) if c.choices)
    assert streamed == full.choices[0].text
    # A stop string cuts the text before it.
    words = full.choices[0].text.split()
    stop = words[3]
    cut = client.completions.create(model="smollm2", prompt="Once upon a time", max_tokens=20, temperature=0,
                                    stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert stop not in cut.choices[0].text
    assert full.choices[0].text.startswith(cut.choices[0].text)
    # n choices, seeded: reproducible.
    a = client.completions.create(model="smollm2", prompt="The weather", max_tokens=8, n=3, seed=7, temperature=1.0)
    b = client.completions.create(model="smollm2", prompt="The weather", max_tokens=8, n=3, seed=7, temperature=1.0)
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]


def test_best_of_returns_the_most_likely_candidates(client):
    """best_of 5, n 2: the two of the five seeded candidates whose tokens are most likely, found
    independently by asking for all five (n 5, the same per-candidate seeds) with their logprobs."""
    kw = dict(model="smollm2", prompt="The capital of France is", max_tokens=6, seed=3, temperature=1.0)
    all_five = client.completions.create(n=5, logprobs=0, **kw)
    ranked = sorted(all_five.choices, key=lambda c: (-sum(c.logprobs.token_logprobs), c.index))
    best = client.completions.create(n=2, best_of=5, **kw)
    assert [c.index for c in best.choices] == [0, 1]
    assert [c.text for c in best.choices] == [c.text for c in ranked[:2]]
    assert best.choices[0].logprobs is None  # not asked for
    assert best.usage.completion_tokens == all_five.usage.completion_tokens  # every candidate counts


def test_echo_with_logprobs_gives_prompt_logprobs(server, client):
    prompt_ids = json.loads(server.post("/tokenize", {"prompt": "The cat sat on the mat"})[1])["tokens"]
    r = client.completions.create(model="smollm2", prompt=prompt_ids, max_tokens=1, temperature=0, echo=True,
                                  logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(prompt_ids) + 1
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x <= 0 for x in lp.token_logprobs[1:])
    assert all(len(t) >= 1 for t in lp.top_logprobs[1:])
    # The greedy token's logprob is the best alternative's.
    assert abs(lp.token_logprobs[-1] - max(lp.top_logprobs[-1].values())) < 1e-6
    assert r.choices[0].text.startswith("The cat sat on the mat")
    # max_tokens 0 with echo: the prompt alone (what lm-eval's loglikelihood may ask).
    r0 = client.completions.create(model="smollm2", prompt=prompt_ids, max_tokens=0, echo=True, logprobs=0)
    assert len(r0.choices[0].logprobs.tokens) == len(prompt_ids)
    assert r0.usage.completion_tokens == 0


def test_errors_reach_the_client_as_openai_exceptions(server, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt="hi", temperature=5)
    assert "temperature" in str(e.value)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="hi")
    long_prompt = list(range(100, 100 + 2100))
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt=long_prompt, max_tokens=4)
    assert "2048" in str(e.value) and "2100" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt="hi", max_tokens=2048)
    assert "2048" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="smollm2", prompt=[1, 2, 10**7])


def test_raw_http_errors_are_openai_shaped(server):
    cases = [
        (server.post("/v1/completions", raw=b"{not json"), 400),
        (server.post("/v1/completions", {"prompt": "x", "max_tokens": "ten"}), 400),
        (server.post("/v1/completions", {"max_tokens": 3}), 400),
        (server.post("/v1/chat/completions", {"messages": []}), 400),
        (server.post("/v1/completions", {"prompt": "x", "n": 1000}), 400),
        (server.post("/v1/completions", raw=b"{" + b" " * (9 << 20) + b"}"), 413),
        (server.get("/v1/nothing-here"), 404),
    ]
    for (status, body), expected in cases:
        assert status == expected, body
        err = json.loads(body)["error"]
        assert err["message"] and err["type"]
    assert server.get("/health")[0] == 200


def test_tokenize_detokenize_round_trip(server):
    status, body = server.post("/tokenize", {"prompt": "Hello world, tqserve!", "add_special_tokens": False})
    assert status == 200
    ids = json.loads(body)["tokens"]
    status, body = server.post("/detokenize", {"tokens": ids})
    assert json.loads(body)["prompt"] == "Hello world, tqserve!"


PROMPTS = [f"{start} {tail}" for start in ["Once upon a time", "The little dog", "In the morning", "My favourite food",
                                           "The scientist said", "On the moon", "A quiet river", "The old king"]
           for tail in ["there was", "we saw", "it was", "they found", "she said", "he ran", "it rained", "all day"]]


def _stream_text(client, prompt):
    out = []
    for c in client.completions.create(model="smollm2", prompt=prompt, max_tokens=16, temperature=0, stream=True):
        if c.choices:
            out.append(c.choices[0].text)
    return "".join(out)


def test_64_concurrent_streams_equal_each_request_alone(server, client):
    assert len(PROMPTS) == 64
    runs = [client.completions.create(model="smollm2", prompt=p, max_tokens=16, temperature=0) for p in PROMPTS]
    alone = [r.choices[0].text for r in runs]
    # The engine publishes its counters after a step's outputs have gone out, so a client can hold
    # its last token before the metrics count it: read them once the engine is idle.
    before = server.wait_idle()
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        together = list(pool.map(lambda p: _stream_text(client, p), PROMPTS))
    for p, a, t in zip(PROMPTS, alone, together):
        assert t == a, f"{p!r}: alone {a!r}, among 63 others {t!r}"
    m = server.wait_idle()
    assert m["tqserve:kv_cache_blocks_in_use"] == 0
    assert m["tqserve:num_requests_running"] == 0
    assert (m["tqserve:generation_tokens_total"] - before["tqserve:generation_tokens_total"]
            == sum(r.usage.completion_tokens for r in runs))
    assert m["tqserve:prefix_cache_queries_total"] > before["tqserve:prefix_cache_queries_total"]
    assert m["tqserve:time_to_first_token_seconds_count"] >= 64


def test_a_client_that_disconnects_frees_its_blocks(server):
    body = json.dumps({"prompt": "Tell me a very long story.", "max_tokens": 1500, "temperature": 0.8,
                       "stream": True, "ignore_eos": True}).encode()
    before = server.wait_idle()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while got.count(b"data: ") < 3:
        got += sock.recv(4096)
    assert server.metrics()["tqserve:kv_cache_blocks_in_use"] > 0
    sock.close()
    m = server.wait_idle(timeout=30)
    assert m["tqserve:kv_cache_blocks_in_use"] == 0
    aborted = m.get('tqserve:request_success_total{finished_reason="abort"}', 0)
    assert aborted == before.get('tqserve:request_success_total{finished_reason="abort"}', 0) + 1
    assert m["tqserve:generation_tokens_total"] - before["tqserve:generation_tokens_total"] < 1500


def test_metrics_exposition(server):
    status, text = server.get("/metrics")
    assert status == 200
    for name in ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prefix_cache_queries_total",
                 "prefix_cache_hits_total", "prompt_tokens_total", "generation_tokens_total",
                 "time_to_first_token_seconds_bucket", "inter_token_latency_seconds_sum",
                 "e2e_request_latency_seconds_count", "http_connections_open", "http_worker_threads"]:
        assert f"tqserve:{name}" in text, name
    assert f'kv_cache_dtype="{server.mode}"' in text


def test_vllm_metric_names_and_server_info(server):
    """Routers built for vLLM read its metric names (with a model_name label), its cache config
    and /server_info; requests carrying the fields routers add are served."""
    prompt = "The history of the printing press " * 8  # several blocks: the second request hits
    for _ in range(2):
        status, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": 4, "temperature": 0,
                                                       "no_stop_trim": True, "skip_special_tokens": True})
        assert status == 200, body
    m = server.wait_idle(timeout=30)
    for name in ["num_requests_running", "num_requests_waiting", "kv_cache_usage_perc", "prefix_cache_queries_total",
                 "prefix_cache_hits_total", "prompt_tokens_total", "generation_tokens_total", "num_preemptions_total",
                 "time_to_first_token_seconds_count", "e2e_request_latency_seconds_sum"]:
        assert m[f"vllm:{name}"] == m[f"tqserve:{name}"], name
    assert m["vllm:gpu_cache_usage_perc"] == m["vllm:kv_cache_usage_perc"]
    assert m["vllm:gpu_prefix_cache_hits_total"] == m["vllm:prefix_cache_hits_total"] > 0
    status, text = server.get("/metrics")
    model = json.loads(server.get("/v1/models")[1])["data"][0]["id"]
    samples = [line for line in text.splitlines() if line.startswith("vllm:")]
    assert samples and all(f'model_name="{model}"' in line for line in samples)
    status, body = server.get("/server_info")
    assert status == 200
    info = json.loads(body)
    assert info["model"] == model and info["kv_cache_dtype"] == server.mode
    config = [line for line in samples if line.startswith("vllm:cache_config_info{")]
    assert len(config) == 1 and config[0].endswith(" 1")
    assert f'block_size="{info["block_size"]}"' in config[0]
    assert f'num_gpu_blocks="{info["num_gpu_blocks"]}"' in config[0] and info["num_gpu_blocks"] > 0
    assert info["enable_prefix_caching"] is True  # the server's default
    assert 'enable_prefix_caching="True"' in config[0]
    # vLLM's /tokenize, with the fields a router adds
    status, body = server.post("/tokenize", {"model": model, "prompt": "Hello world", "add_special_tokens": False,
                                             "no_stop_trim": True})
    assert status == 200 and json.loads(body)["count"] == len(json.loads(body)["tokens"]) > 0


def test_worker_threads_follow_the_load(server):
    """HTTP worker threads start as connections arrive and exit after 5 s idle (8 are kept)."""
    socks = []
    try:
        for _ in range(40):  # 40 keep-alive connections, each with one answered request
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        for s in socks:
            assert b"200" in s.recv(4096).split(b"\r\n")[0]
        m = server.metrics()
        assert m["tqserve:http_connections_open"] >= 40
        assert m["tqserve:http_worker_threads"] >= 40
    finally:
        for s in socks:
            s.close()
    # The server sees a closed connection when it next reads it, so both counts fall in their own time.
    deadline = time.time() + 30
    while time.time() < deadline:
        m = server.metrics()
        if m["tqserve:http_worker_threads"] <= 9 and m["tqserve:http_connections_open"] <= 1:
            break
        time.sleep(0.5)
    assert m["tqserve:http_worker_threads"] <= 9  # the 8 kept, and perhaps the one serving /metrics
    assert m["tqserve:http_connections_open"] <= 1


def test_api_key_health_and_queue_limit(smollm2):
    s = ServerProcess(BINARY, smollm2, "--api-key", "sekret", "--kv-cache-memory", "64MiB", "--max-model-len", "1024",
                      "--max-num-seqs", "1", "--max-queued-requests", "0", "--served-model-name", "m")
    try:
        assert s.get("/health")[0] == 200
        status, body = s.get("/v1/models")
        assert status == 401 and json.loads(body)["error"]["type"] == "authentication_error"
        bad = openai.OpenAI(base_url=s.url + "/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        good = openai.OpenAI(base_url=s.url + "/v1", api_key="sekret", max_retries=0, timeout=120)
        assert good.models.list().data[0].id == "m"
        # One running, none may wait: of several at once, some are turned away with 503.
        auth = {"Authorization": "Bearer sekret"}
        body = {"prompt": "Count to one hundred:", "max_tokens": 64, "temperature": 0, "ignore_eos": True}
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            results = list(pool.map(lambda _: s.post("/v1/completions", body, headers=auth), range(6)))
        codes = sorted(c for c, _ in results)
        assert 200 in codes and 503 in codes, codes
        for code, text in results:
            if code == 503:
                assert json.loads(text)["error"]["message"]
    finally:
        assert s.stop() == 0


def test_refuses_to_start_when_one_request_cannot_fit(tqserve, smollm2):
    proc = tqserve("serve", smollm2, "--port", "0", "--kv-cache-memory", "8MiB", "--max-model-len", "4096",
                   check=False, timeout=120)
    assert proc.returncode == 1
    assert "--max-model-len 4096 needs" in proc.stderr and "longest context that fits is" in proc.stderr, proc.stderr


def test_bench_serve_reports_latencies_and_throughput(server, tqserve):
    proc = tqserve("bench", "serve", "--url", server.url, "--num-prompts", "6", "--concurrency", "3",
                   "--input-len", "24", "--output-len", "5", "--json", timeout=300)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    assert r["completed"] == 6 and r["failed"] == 0 and r["model"] == "smollm2"
    for key in ("ttft_ms", "tpot_ms", "itl_ms"):
        assert 0 < r[key]["median"] <= r[key]["p99"], r
    assert r["output_throughput"] > 0 and r["request_throughput"] > 0
    assert r["output_throughput"] * r["duration_s"] == pytest.approx(6 * 5)
    m = server.wait_idle()
    assert m["tqserve:kv_cache_blocks_in_use"] == 0


def test_chat_logprobs(client):
    r = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                       temperature=0, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob
        assert abs(entry.logprob - entry.top_logprobs[0].logprob) < 1e-6  # greedy: the best token


def test_sigterm_finishes_in_flight_requests(smollm2):
    import signal as sig
    s = ServerProcess(BINARY, smollm2, "--kv-cache-memory", "64MiB", "--max-model-len", "1024")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(s.post, "/v1/completions",
                              {"prompt": "Once upon a time", "max_tokens": 80, "temperature": 0, "ignore_eos": True})
        deadline = time.time() + 30
        while s.metrics()["tqserve:num_requests_running"] == 0 and time.time() < deadline:
            time.sleep(0.02)
        s.proc.send_signal(sig.SIGTERM)
        status, body = pending.result(timeout=120)
    assert status == 200, body
    assert json.loads(body)["usage"]["completion_tokens"] == 80
    assert s.proc.wait(60) == 0
    assert any("finishing in-flight requests" in line for line in s.log)


def test_health_is_503_while_loading(smollm2, tmp_path):
    # The socket is open before the model loads; the test holds the load (TQSERVE_TEST_LOADING_GATE)
    # until it has seen the loading answers, then lets it finish.
    gate = tmp_path / "loading-gate"
    s = ServerProcess(BINARY, smollm2, "--kv-cache-dtype", "tq3", "--kv-cache-memory", "64MiB",
                      "--max-model-len", "1024", wait_healthy=False, env={"TQSERVE_TEST_LOADING_GATE": str(gate)})
    try:
        status, _ = s.get("/health")
        assert status == 503
        status, body = s.get("/v1/models")
        assert status == 503 and json.loads(body)["error"]["message"] == "the model is still loading"
        gate.touch()
        s.wait_healthy()
        assert s.get("/health")[0] == 200
    finally:
        assert s.stop() == 0
