"""The load side of the soak (scripts/soak.py): the word corpus, the request mix (Workload), a raw
HTTP/1.1 client that can drop a stream mid-way (HttpConn), the per-request and per-client loops,
the warm-up sweep and the greedy reference requests. The counters the clients keep are in Stats."""
import asyncio
import json
import random
import time

from soak_probes import read_status, wait_connections_closed

WORDS = ("the a of and to in is was he she it they we you that with for on at by from this one all her his "
         "their little big old new good small long great first last own other same dog cat bird king queen "
         "river forest mountain village city house garden window door road bridge ship sea sky sun moon star "
         "rain snow wind fire stone tree flower apple bread water milk book letter song story dream friend "
         "mother father child girl boy teacher doctor farmer sailor soldier painter walked ran said found saw "
         "made took gave told asked looked wanted liked knew thought came went sat stood slept laughed cried "
         "because when while after before under over through between around quickly slowly quietly happily "
         "suddenly always never often today tomorrow morning evening night winter summer spring autumn red blue "
         "green yellow white black bright dark warm cold soft loud").split()

QUESTIONS = ["What happens next?", "Summarize the story.", "Who is the main character?", "Write a short poem.",
             "Translate the first sentence into French.", "List three colours.", "What is two plus two?",
             "Tell me a joke.", "Describe the weather.", "Why is the sky blue?"]


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


class Stats:
    def __init__(self):
        self.status = {}          # HTTP status -> responses
        self.requests = 0
        self.completed = 0        # streams that ended with [DONE]
        self.aborted = 0          # dropped on purpose mid-stream (abort fraction)
        self.cut_at_end = 0       # still open at the deadline, dropped
        self.stream_errors = []   # error events inside 200 streams, truncated streams, protocol errors
        self.client_errors = []   # connection failures and the like
        self.tokens_streamed = 0  # completion tokens the clients received (chunks with text)
        self.usage_tokens = 0     # usage.completion_tokens of completed streams
        self.chunks = 0
        self.by_kind = {"completion": 0, "chat": 0}
        self.keepalive_reuses = 0
        self.finish = {}

    def count_status(self, code):
        self.status[code] = self.status.get(code, 0) + 1


class StreamDropped(Exception):
    pass


class HttpConn:
    """One HTTP/1.1 connection: a request, then the response (Content-Length or chunked)."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.reader = self.writer = None
        self.uses = 0

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    def close(self):
        if self.writer is not None:
            try:
                self.writer.transport.abort()  # RST/FIN now, no lingering
            except Exception:
                pass
            self.writer = self.reader = None

    async def request(self, path, body, keep_alive):
        data = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(data)}\r\n"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n").encode()
        self.writer.write(head + data)
        await self.writer.drain()
        self.uses += 1
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection before answering")
        parts = status_line.decode("latin-1").split(" ", 2)
        status = int(parts[1])
        headers = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip()
        return status, headers

    async def body_chunks(self, headers):
        """Yields the body's pieces as they arrive (each chunk of a chunked body)."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = await self.reader.readline()
                if not size_line:
                    raise ConnectionError("the connection closed inside a chunked body")
                size = int(size_line.split(b";")[0].strip(), 16)
                if size == 0:
                    while (await self.reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return
                data = await self.reader.readexactly(size)
                await self.reader.readexactly(2)
                yield data
        elif "content-length" in headers:
            n = int(headers["content-length"])
            if n:
                yield await self.reader.readexactly(n)
        else:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    return
                yield data


class Workload:
    """Prompts: shared prefixes (token ids for completions, system messages for chat) plus
    unique tails drawn from a tokenized word corpus."""

    def __init__(self, server, rng, max_model_len):
        self.rng = rng
        self.max_model_len = max_model_len
        corpus_rng = random.Random(1234)
        text = words(corpus_rng, 2600)
        status, body = server.post("/tokenize", {"prompt": text, "add_special_tokens": False})
        if status != 200:
            raise RuntimeError(f"/tokenize failed: {status} {body}")
        self.corpus = json.loads(body)["tokens"]
        if len(self.corpus) < 2000:
            raise RuntimeError(f"the corpus has {len(self.corpus)} tokens, fewer than 2000")
        # Shared completion prefixes: 4 documents of 64..1024 tokens.
        self.prefixes = [self.corpus[i * 97:i * 97 + n] for i, n in enumerate([64, 256, 640, 1024])]
        # Shared chat system prompts of ~30..600 words.
        self.systems = []
        for i, n in enumerate([30, 150, 400, 600]):
            sys_text = "You are a helpful storyteller. Background: " + words(random.Random(99 + i), n)
            self.systems.append(sys_text)
        self.tokens_per_word = len(self.corpus) / 2600

    # The mix is sized for a 2-core box that prefills ~300 tokens/s and decodes ~120 tokens/s over
    # 64 streams (docs/BENCHMARKS.md): with 200 clients in a closed loop a request must cost
    # little on average for many to finish in 30 s. So long prompts come mostly as shared
    # prefixes (computed once, then prefix-cache hits; the reference requests cache them before
    # the load), unique prompts are mostly short, and a few long unique ones (up to 1900 tokens)
    # still come; max_tokens is mostly small.
    def unique_len(self):
        r = self.rng.random()
        if r < 0.85:
            return self.rng.randint(3, 32)
        if r < 0.99:
            return self.rng.randint(33, 160)
        return self.rng.randint(161, 1900)

    def max_tokens(self):
        return self.rng.choice([1, 2, 3, 4, 6, 8, 8, 12, 16, 16, 24, 32, 48, 64, 128])

    def sampling(self, body, prompt_tokens):
        room = self.max_model_len - prompt_tokens - 8
        body["max_tokens"] = max(1, min(room, self.max_tokens()))
        r = self.rng.random()
        if r < 0.3:
            body["temperature"] = 0
        else:
            body["temperature"] = round(self.rng.uniform(0.3, 1.2), 2)
            body["top_p"] = round(self.rng.uniform(0.5, 1.0), 2)
            if self.rng.random() < 0.3:
                body["top_k"] = self.rng.randint(1, 50)
        if self.rng.random() < 0.3:
            body["ignore_eos"] = True
        if self.rng.random() < 0.1:
            body["stop"] = [self.rng.choice(WORDS)]
        if self.rng.random() < 0.05:
            body["n"] = 2
        if self.rng.random() < 0.1:
            body["logprobs"] = 2 if "prompt" in body else True
            if "messages" in body:
                body["top_logprobs"] = 2
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    def completion(self):
        if self.rng.random() < 0.5:
            # A shared prefix (cut at a random point past its first half) and a short tail.
            prefix = self.rng.choice(self.prefixes)
            prefix = prefix[:self.rng.randint(len(prefix) // 2, len(prefix))]
            tail_n = self.rng.randint(1, 24)
        else:
            prefix, tail_n = [], self.unique_len()
        start = self.rng.randrange(0, len(self.corpus) - tail_n)
        prompt = (prefix + self.corpus[start:start + tail_n])[:1900]
        return "/v1/completions", self.sampling({"prompt": prompt}, len(prompt))

    def chat(self):
        msgs = []
        if self.rng.random() < 0.6:
            msgs.append({"role": "system", "content": self.rng.choice(self.systems)})
        # The whole conversation stays under ~1800 tokens (estimated from the words).
        room = 1700 - sum(len(m["content"].split()) for m in msgs) * self.tokens_per_word
        n_words = max(1, int(min(self.unique_len(), room) / self.tokens_per_word))
        msgs.append({"role": "user", "content": words(self.rng, n_words) + " " + self.rng.choice(QUESTIONS)})
        if self.rng.random() < 0.2:
            msgs += [{"role": "assistant", "content": words(self.rng, 20)},
                     {"role": "user", "content": self.rng.choice(QUESTIONS)}]
        # Keep well inside the context: the template's tokens are estimated, not counted.
        approx = int(sum(len(m["content"].split()) for m in msgs) * self.tokens_per_word * 1.15) + 40
        return "/v1/chat/completions", self.sampling({"messages": msgs}, min(approx, 1950))

    def next(self):
        return self.chat() if self.rng.random() < 0.4 else self.completion()


async def one_request(conn_state, host, port, path, body, drop_after, stats, deadline, rng):
    """Sends one streamed request; returns True if the connection may be reused."""
    keep_alive = rng.random() < 0.5
    conn = conn_state.get("conn")
    if conn is not None and conn.writer is not None:
        stats.keepalive_reuses += 1
    else:
        conn = HttpConn(host, port)
        await conn.open()
        conn_state["conn"] = conn
    stats.requests += 1
    stats.by_kind["chat" if "messages" in body else "completion"] += 1
    status, headers = await asyncio.wait_for(conn.request(path, body, keep_alive), max(1.0, deadline - time.time()))
    stats.count_status(status)
    if status != 200:
        raw = b"".join([c async for c in conn.body_chunks(headers)])
        stats.stream_errors.append(f"HTTP {status}: {raw[:300]!r}")
        return keep_alive and headers.get("connection", "").lower() != "close"
    buf = b""
    events = 0
    done = False
    finishes = {}
    usage = None
    async for piece in conn.body_chunks(headers):
        buf += piece
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if event.startswith(b":"):
                continue  # keep-alive comment
            if not event.startswith(b"data: "):
                stats.stream_errors.append(f"not an SSE event: {event[:200]!r}")
                continue
            payload = event[6:]
            if payload == b"[DONE]":
                done = True
                continue
            obj = json.loads(payload)
            if "error" in obj:
                stats.stream_errors.append(f"error event in a 200 stream: {payload[:300]!r}")
                continue
            events += 1
            stats.chunks += 1
            for ch in obj.get("choices", []):
                piece_text = ch.get("text") if "text" in ch else (ch.get("delta") or {}).get("content")
                if piece_text:
                    stats.tokens_streamed += 1
                if ch.get("finish_reason"):
                    finishes[ch.get("index", 0)] = ch["finish_reason"]
            if obj.get("usage"):
                usage = obj["usage"]
            if drop_after is not None and events >= drop_after:
                raise StreamDropped()
    if not done:
        stats.stream_errors.append(f"stream ended without [DONE] after {events} events")
        return False
    n = body.get("n", 1)
    if len(finishes) != n:
        stats.stream_errors.append(f"stream ended with finish reasons {finishes} for n={n}")
    for f in finishes.values():
        stats.finish[f] = stats.finish.get(f, 0) + 1
    if usage is None:
        stats.stream_errors.append("completed stream without usage")
    else:
        stats.usage_tokens += usage.get("completion_tokens", 0)
    stats.completed += 1
    return keep_alive and headers.get("connection", "").lower() != "close"


async def client_loop(idx, host, port, workload, stats, deadline, abort_fraction, seed):
    rng = random.Random(seed * 1000 + idx)
    conn_state = {}
    while time.time() < deadline:
        path, body = workload.next()
        drop_after = None
        if rng.random() < abort_fraction:
            drop_after = rng.choice([0, 0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89])
        try:
            if drop_after == 0:
                # Drop before the first chunk: send, wait a little (queued or prefilling), close.
                conn = HttpConn(host, port)
                await conn.open()
                stats.requests += 1
                stats.by_kind["chat" if "messages" in body else "completion"] += 1
                data = json.dumps(body).encode()
                conn.writer.write((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                   f"Content-Length: {len(data)}\r\n\r\n").encode() + data)
                await conn.writer.drain()
                await asyncio.sleep(rng.uniform(0, 0.5))
                conn.close()
                stats.aborted += 1
                continue
            reuse = await asyncio.wait_for(
                one_request(conn_state, host, port, path, body, drop_after, stats, deadline, rng),
                timeout=max(0.5, deadline - time.time()))
            if not reuse and conn_state.get("conn"):
                conn_state["conn"].close()
                conn_state["conn"] = None
        except StreamDropped:
            stats.aborted += 1
            conn_state["conn"].close()
            conn_state["conn"] = None
        except asyncio.TimeoutError:
            stats.cut_at_end += 1
            if conn_state.get("conn"):
                conn_state["conn"].close()
                conn_state["conn"] = None
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure is a finding
            stats.client_errors.append(f"{type(e).__name__}: {e}")
            if conn_state.get("conn"):
                conn_state["conn"].close()
                conn_state["conn"] = None
            await asyncio.sleep(0.2)
    if conn_state.get("conn"):
        conn_state["conn"].close()


def reference_requests(workload):
    """Greedy requests whose prompts start with the shared prefixes."""
    refs = []
    for i, p in enumerate(workload.prefixes):
        refs.append(("/v1/completions", {"prompt": p + workload.corpus[1500 + i:1510 + i], "max_tokens": 16,
                                         "temperature": 0, "ignore_eos": True}))
    for s in workload.systems:
        refs.append(("/v1/chat/completions", {"messages": [{"role": "system", "content": s},
                                                           {"role": "user", "content": "Tell me a story."}],
                                              "max_tokens": 16, "temperature": 0, "ignore_eos": True}))
    return refs


def run_references(server, refs):
    out = []
    for path, body in refs:
        status, text = server.post(path, body, timeout=300)
        if status != 200:
            out.append(f"HTTP {status}")
            continue
        r = json.loads(text)["choices"][0]
        out.append(r.get("text") if "text" in r else r["message"]["content"])
    return out


async def run_clients(server, args, workload, mode, stats, seconds, phase, seed):
    """N clients loop for `seconds`; whatever is still streaming then is dropped."""
    start = time.time()
    deadline = start + seconds
    tasks = [asyncio.create_task(client_loop(i, "127.0.0.1", server.port, workload, stats, deadline,
                                             args.abort_fraction, seed))
             for i in range(args.clients)]
    last = start
    while any(not t.done() for t in tasks):
        await asyncio.sleep(0.5)
        if args.verbose and time.time() - last >= args.progress_every:
            last = time.time()
            st = read_status(server.proc.pid)
            m = await asyncio.get_running_loop().run_in_executor(None, server.metrics)
            print(f"  [{mode} {phase}] t={time.time() - start:4.0f}s requests={stats.requests} "
                  f"completed={stats.completed} aborted={stats.aborted} tokens={stats.tokens_streamed} "
                  f"rss={st.get('VmRSS', 0) / 1024:.1f}MiB | server: "
                  f"running={m.get('tqserve:num_requests_running', 0):.0f} "
                  f"waiting={m.get('tqserve:num_requests_waiting', 0):.0f} "
                  f"blocks={m.get('tqserve:kv_cache_blocks_in_use', 0):.0f} "
                  f"generated={m.get('tqserve:generation_tokens_total', 0):.0f} "
                  f"preempted={m.get('tqserve:num_preemptions_total', 0):.0f}", flush=True)
        if time.time() > deadline + 30:
            break
    for t in tasks:
        if not t.done():
            t.cancel()
    for r in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(r, Exception) and not isinstance(r, asyncio.CancelledError):
            stats.client_errors.append(f"client task: {type(r).__name__}: {r}")


async def sweep(server, args, workload):
    """The start of the warm-up phase: brings the server to its high-water marks at once, so that
    RSS growth after the warm-up means a leak, not a first use. (1) Nearly --max-connections
    connections at once, each with a tiny streamed completion or chat, then holding its worker
    thread (keep-alive) until all are answered: every HTTP worker thread has run the whole
    completion path (its stack and malloc caches are warm), and the engine ran full batches.
    (2) --max-num-seqs tiny completions at once plus one 1900-token prompt: a full batch and a
    full step with a long context (the engine's buffers reach their largest). Returns the HTTP
    statuses seen."""
    host, port = "127.0.0.1", server.port
    statuses = {}
    answered = failed = 0
    gate = asyncio.Event()

    async def hold(i):
        nonlocal answered, failed
        conn = HttpConn(host, port)
        if i % 2:
            path, body = "/v1/chat/completions", {
                "messages": [{"role": "system", "content": workload.systems[0]},
                             {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}]}
        else:
            path, body = "/v1/completions", {"prompt": workload.corpus[i:i + 3]}
        body.update({"max_tokens": 2, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
        try:
            await conn.open()
            status, headers = await conn.request(path, body, keep_alive=True)
            async for _ in conn.body_chunks(headers):
                pass
            statuses[status] = statuses.get(status, 0) + 1
            answered += 1
            await gate.wait()
        except Exception:
            failed += 1
            raise
        finally:
            conn.close()

    n_conn = max(1, args.max_connections - 8)
    tasks = [asyncio.create_task(hold(i)) for i in range(n_conn)]
    deadline = time.time() + 600
    while answered + failed < n_conn and time.time() < deadline:
        await asyncio.sleep(0.2)
    gate.set()
    for r in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(r, Exception):
            statuses[type(r).__name__] = statuses.get(type(r).__name__, 0) + 1
    # The server notices the closes on its own time: wait, or (2) would exceed the limit.
    await wait_connections_closed(port)

    async def complete(body):
        conn = HttpConn(host, port)
        try:
            await conn.open()
            status, headers = await conn.request("/v1/completions", body, keep_alive=False)
            async for _ in conn.body_chunks(headers):
                pass
            statuses[status] = statuses.get(status, 0) + 1
        finally:
            conn.close()

    long_prompt = workload.corpus[:min(1900, args.max_model_len - 8)]
    bodies = [{"prompt": workload.corpus[i:i + 2], "max_tokens": 2, "ignore_eos": True, "stream": True}
              for i in range(args.max_num_seqs)]
    bodies.append({"prompt": long_prompt, "max_tokens": 1, "stream": True})
    for r in await asyncio.gather(*(complete(b) for b in bodies), return_exceptions=True):
        if isinstance(r, Exception):
            statuses[type(r).__name__] = statuses.get(type(r).__name__, 0) + 1
    return statuses
