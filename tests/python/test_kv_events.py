"""KV cache events (--kv-events-endpoint) as a KV-aware router receives them: ZeroMQ messages of
three frames [topic, 8-byte big-endian sequence number, MessagePack EventBatch], decoded here with
the reference msgpack package into the shape vllm-router 0.1.17 decodes (its kv_index/decode.rs:
[timestamp, [event maps tagged by "type"], rank]). Stored blocks carry the request's tokens, chained
by parent hash; evicted blocks are removed by the same hashes; a subscriber of a fresh (or
restarted) replica is told that its cache is empty; the discovery endpoints say where to listen."""
import json
import re
import socket
import subprocess
import time
import urllib.request

import pytest

zmq = pytest.importorskip("zmq")
msgpack = pytest.importorskip("msgpack")

from conftest import BINARY, REPO  # noqa: E402
from server_process import ServerProcess  # noqa: E402

ROUTER = REPO / "build" / "router-venv" / "bin" / "vllm-router"  # scripts/setup.sh installs it
TOPIC = "kv@test"
BLOCK = 16
# vllm-router 0.1.17 requires these fields of BlockStored (and allows no others of ours).
STORED_FIELDS = {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Subscriber:
    def __init__(self, endpoint):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)  # may come before the replica binds: ZeroMQ keeps trying
        self.messages = []  # (topic, sequence, batch)

    def receive(self, quiet_s=1.0, timeout_s=60.0, until=None):
        """Collects messages until `until(batch)` holds, or none came for quiet_s."""
        deadline, last = time.time() + timeout_s, time.time()
        got = []
        while time.time() < deadline:
            if self.sock.poll(100):
                frames = self.sock.recv_multipart()
                assert len(frames) == 3, frames
                topic, seq, payload = frames
                assert len(seq) == 8
                batch = msgpack.unpackb(payload, raw=False)
                got.append((topic.decode(), int.from_bytes(seq, "big"), batch))
                last = time.time()
                if until and until(batch):
                    break
            elif until is None and time.time() - last > quiet_s:
                break
        self.messages += got
        return got

    def close(self):
        self.sock.close(0)
        self.ctx.term()


def events(messages, kind):
    return [e for _, _, batch in messages for e in batch[1] if e["type"] == kind]


def is_cleared(batch):
    return any(e["type"] == "AllBlocksCleared" for e in batch[1])


def complete(server, prompt):
    status, body = server.post("/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0})
    assert status == 200, body
    status, body = server.post("/tokenize", {"prompt": prompt})
    assert status == 200, body
    return json.loads(body)["tokens"]


def test_events_follow_the_prefix_cache(smollm2):
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    sub = Subscriber(endpoint)
    # 32 MiB of f16 KV: 91 blocks of 16 tokens, so the prompts below evict each other's blocks.
    args = [smollm2, "--kv-cache-dtype", "f16", "--kv-cache-memory", "32MiB", "--max-model-len", "512",
            "--kv-events-endpoint", endpoint, "--kv-events-topic", TOPIC]
    server = ServerProcess(BINARY, *args)
    try:
        # Discovery, as a router does it.
        status, body = server.get("/get_server_info")
        assert status == 200 and json.loads(body)["kv_block_size"] == BLOCK
        status, body = server.get("/kv_event_sources")
        source = json.loads(body)["0"]
        assert source["endpoint"] == endpoint and source["topic"] == TOPIC and source["publisher"] == "zmq"
        assert source["enable_kv_cache_events"] is True

        # A fresh replica's first word to a subscriber: its cache is empty.
        first = sub.receive(until=is_cleared)
        assert first and is_cleared(first[-1][2]) and first[-1][2][1] == [{"type": "AllBlocksCleared"}]

        prompt = "The lighthouse keeper wrote in his log every night about the sea and the ships. " * 3
        ids = complete(server, prompt)
        stored = events(sub.receive(), "BlockStored")
        assert stored, "no BlockStored after a prompt of several blocks"
        for e in stored:
            assert set(e) == STORED_FIELDS, e
            assert e["block_size"] == BLOCK and e["medium"] == "GPU" and e["lora_id"] is None and e["lora_name"] is None
            assert len(e["token_ids"]) == BLOCK * len(e["block_hashes"])
            assert all(isinstance(h, int) and 0 <= h < 2**64 for h in e["block_hashes"])
        assert stored[0]["parent_block_hash"] is None
        for before, after in zip(stored, stored[1:]):
            assert after["parent_block_hash"] == before["block_hashes"][-1]
        chain = [h for e in stored for h in e["block_hashes"]]
        tokens = [t for e in stored for t in e["token_ids"]]
        full = len(ids) // BLOCK
        assert tokens == ids[:full * BLOCK]  # the prompt's full blocks, in order

        # The same prompt again is served from the cache: nothing new is stored.
        complete(server, prompt)
        assert events(sub.receive(), "BlockStored") == []
        # A longer prompt with that prefix stores only its new blocks, chained to the cached ones.
        longer = complete(server, prompt + "One night a storm came from the north and the light went out. " * 2)
        grown = events(sub.receive(), "BlockStored")
        assert grown and grown[0]["parent_block_hash"] == chain[full - 1]
        assert [t for e in grown for t in e["token_ids"]] == longer[full * BLOCK:(len(longer) // BLOCK) * BLOCK]
        all_stored = set(chain) | {h for e in grown for h in e["block_hashes"]}

        # Other prompts fill the cache: the oldest cached blocks are evicted, and said to be.
        for i in range(8):
            text = f"Story {i}: " + " ".join(f"word{i}x{j}" for j in range(60))
            complete(server, text)
        later = sub.receive()
        removed = [h for e in events(later, "BlockRemoved") for h in e["block_hashes"]]
        assert removed, "no BlockRemoved although the prompts outgrew the cache"
        for e in events(later, "BlockRemoved"):
            assert set(e) == {"type", "block_hashes", "medium"}
        all_stored |= {h for e in events(later, "BlockStored") for h in e["block_hashes"]}
        assert set(removed) <= all_stored  # only what was announced is withdrawn

        # Frames: the topic, and sequence numbers one apart (nothing lost on loopback).
        assert {t for t, _, _ in sub.messages} == {TOPIC}
        seqs = [s for _, s, _ in sub.messages]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        for _, _, batch in sub.messages:
            assert len(batch) == 3 and isinstance(batch[0], float) and batch[2] is None
    finally:
        assert server.stop() == 0, "".join(server.log)

    # A restarted replica on the same endpoint: the subscriber, still connected, hears that the
    # blocks it knew are gone.
    server = ServerProcess(BINARY, *args)
    try:
        again = sub.receive(until=is_cleared)
        assert again and is_cleared(again[-1][2])
    finally:
        assert server.stop() == 0, "".join(server.log)
        sub.close()


def test_bad_endpoint_is_refused_by_name(smollm2, tmp_path):
    with pytest.raises(RuntimeError) as e:
        ServerProcess(BINARY, smollm2, "--kv-events-endpoint", "nonsense://x", startup_timeout=120)
    assert "--kv-events-endpoint 'nonsense://x'" in str(e.value)
    with pytest.raises(RuntimeError) as e:
        ServerProcess(BINARY, smollm2, "--kv-events-endpoint", "tcp://127.0.0.1:1", "--no-enable-prefix-caching",
                      startup_timeout=120)
    assert "needs prefix caching" in str(e.value)


def router_lookups(metrics_port):
    """vllm-router's KV placement lookups by result ({"hit": n, "miss": m})."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r'^vllm_router_kv_placement_lookups_total\{result="(\w+)"\} (\S+)$', text, re.M)}


def test_vllm_router_routes_on_the_events(smollm2):
    """The pinned vllm-router, kv_aware policy: it discovers the replica's events (/get_server_info,
    /kv_event_sources), tokenizes through /tokenize, and after one request finds the prompt's
    blocks in its index: the events decode and their tokens match what it computes."""
    assert ROUTER.exists(), f"{ROUTER} missing: scripts/setup.sh installs vllm-router==0.1.17"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    server = ServerProcess(BINARY, smollm2, "--kv-cache-memory", "64MiB", "--max-model-len", "1024",
                           "--kv-events-endpoint", endpoint, "--served-model-name", "smollm2")
    port, metrics_port = free_port(), free_port()
    router = subprocess.Popen([str(ROUTER), "--port", str(port), "--worker-urls", server.url, "--policy", "kv_aware",
                               "--prometheus-port", str(metrics_port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def complete_via_router(prompt):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                         data=json.dumps({"model": "smollm2", "max_tokens": 4, "temperature": 0,
                                                          "prompt": prompt}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read())["choices"][0]["text"]

        story = "The lighthouse keeper wrote in his log every night about the sea, the ships and the storms "
        deadline = time.time() + 90
        attempt = 0
        while True:  # until the router answers and its subscription is in place: a repeat hits
            attempt += 1
            prompt = f"{story} (warm-up {attempt})"
            try:
                complete_via_router(prompt)
                time.sleep(0.5)
                before = router_lookups(metrics_port)
                complete_via_router(prompt)
                if router_lookups(metrics_port).get("hit", 0) > before.get("hit", 0):
                    break
            except OSError:
                pass
            assert time.time() < deadline and router.poll() is None, "vllm-router never found a cached prompt"
            time.sleep(0.5)

        prompt = story + "that came from the north."
        first = complete_via_router(prompt)  # stored, and announced
        time.sleep(0.5)  # the events reach the router's index
        before = router_lookups(metrics_port)
        for _ in range(2):
            assert complete_via_router(prompt) == first
        after = router_lookups(metrics_port)
        assert after.get("hit", 0) - before.get("hit", 0) == 2, (before, after)
    finally:
        router.terminate()
        router.wait(timeout=30)
        assert server.stop() == 0, "".join(server.log)
