"""Two replicas behind the pinned vllm-router, started by scripts/cluster.sh (issue 22): the official
openai client works through the router, streamed and not, and at temperature 0 its answers equal
those of one replica serving alone; a replica killed with SIGKILL under load costs no request that
starts after the kill (the router retries on the other replica and its health checks take the dead
one out), and the replica the script starts again is routed to once its checks pass."""
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

openai = pytest.importorskip("openai")

from conftest import BINARY, REPO  # noqa: E402
from server_process import ServerProcess  # noqa: E402

ROUTER = REPO / "build" / "router-venv" / "bin" / "vllm-router"  # scripts/setup.sh installs it
CLUSTER = REPO / "scripts" / "cluster.sh"
LOGS = REPO / "build" / "cluster"
SERVE_FLAGS = ["--kv-cache-memory", "64MiB", "--max-model-len", "1024", "--served-model-name", "smollm2"]
PROMPTS = ["The capital of France is", "Once upon a time, a small robot", "def fibonacci(n):",
           "Three facts about the moon:", "The best way to learn a language is", "Water boils at"]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def get(url, timeout=10):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except OSError:
        return None, ""


def finished_requests(replica_url):
    """Requests the replica has finished (its vllm:e2e_request_latency_seconds count)."""
    status, text = get(replica_url + "/metrics")
    assert status == 200, replica_url
    m = re.search(r"^vllm:e2e_request_latency_seconds_count\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


class Cluster:
    def __init__(self, model, replicas=2, policy="round_robin"):
        self.port, first_replica, first_events, metrics = free_ports(4)
        # Replica i serves on first_replica + i and publishes on first_events + i.
        self.replicas = [f"http://127.0.0.1:{first_replica + i}" for i in range(replicas)]
        self.proc = subprocess.Popen(
            ["bash", str(CLUSTER), str(replicas), "--policy", policy, "--port", str(self.port),
             "--replica-port", str(first_replica), "--events-port", str(first_events),
             "--router-metrics-port", str(metrics), "--health-check-interval", "1", "--", model, *SERVE_FLAGS],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.output = []
        started = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.output.append(line)
                if "behind vllm-router" in line:
                    started.set()
            started.set()

        threading.Thread(target=pump, daemon=True).start()
        if not started.wait(300) or self.proc.poll() is not None:
            self.proc.kill()
            raise RuntimeError("cluster.sh did not start:\n" + "".join(self.output))
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", timeout=120, max_retries=0)

    def replica_pid(self, i):
        return int((LOGS / f"replica-{i}.pid").read_text())

    def stop(self):
        pids = [self.replica_pid(i) for i in range(len(self.replicas))]
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(120)
        assert code == 0, "".join(self.output)
        for pid in pids:  # every replica stopped with the script
            assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


@pytest.fixture(scope="module")
def cluster(smollm2):
    if not ROUTER.exists():
        pytest.fail(f"{ROUTER} missing: scripts/setup.sh installs vllm-router==0.1.17")
    c = Cluster(smollm2)
    yield c
    c.stop()


def test_openai_client_through_the_router_equals_one_replica(cluster, smollm2):
    before = [finished_requests(r) for r in cluster.replicas]
    routed = []
    for prompt in PROMPTS:
        out = cluster.client.completions.create(model="smollm2", prompt=prompt, max_tokens=24, temperature=0)
        routed.append(out.choices[0].text)
    chats = []
    for prompt in PROMPTS[:4]:
        stream = cluster.client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": prompt}], max_tokens=24, temperature=0, stream=True)
        chats.append("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
    after = [finished_requests(r) for r in cluster.replicas]
    # round_robin: both replicas answered some of them
    assert all(a > b for a, b in zip(after, before)), (before, after)

    single = ServerProcess(BINARY, smollm2, *SERVE_FLAGS)  # one replica alone, all of this machine's threads
    try:
        client = openai.OpenAI(base_url=single.url + "/v1", api_key="none", timeout=120, max_retries=0)
        alone = [client.completions.create(model="smollm2", prompt=p, max_tokens=24, temperature=0).choices[0].text
                 for p in PROMPTS]
        chats_alone = [client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": p}],
                                                      max_tokens=24, temperature=0).choices[0].message.content
                       for p in PROMPTS[:4]]
    finally:
        single.stop()
    assert routed == alone
    assert chats == chats_alone
    assert all(len(t) > 0 for t in routed + chats)


def test_killed_replica_fails_no_later_request_and_is_routed_to_again(cluster):
    results = []  # (start, end, ok, error)
    stop = threading.Event()

    def client_loop(seed):
        i = seed
        while not stop.is_set():
            start = time.time()
            try:
                stream = cluster.client.completions.create(model="smollm2", prompt=PROMPTS[i % len(PROMPTS)],
                                                           max_tokens=16, temperature=0, stream=True)
                text = "".join(chunk.choices[0].text for chunk in stream if chunk.choices)
                results.append((start, time.time(), len(text) > 0, ""))
            except Exception as e:  # noqa: BLE001 - a failed request is what this test counts
                results.append((start, time.time(), False, repr(e)))
            i += 1

    threads = [threading.Thread(target=client_loop, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        time.sleep(4)
        victim = cluster.replica_pid(1)
        survivor_before = finished_requests(cluster.replicas[0])
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        time.sleep(8)
    finally:
        stop.set()
        for t in threads:
            t.join(180)
    after_kill = [r for r in results if r[0] > killed_at]
    before_kill = [r for r in results if r[1] < killed_at]
    assert len(before_kill) >= 3 and all(r[2] for r in before_kill), before_kill
    assert len(after_kill) >= 5, results
    failed = [r for r in after_kill if not r[2]]
    assert not failed, failed  # every request started after the kill was answered
    # ... by the survivor, or by replica 1 once cluster.sh had started it again (a fresh process)
    survivor_served = finished_requests(cluster.replicas[0]) - survivor_before
    restarted_served = finished_requests(cluster.replicas[1]) if get(cluster.replicas[1] + "/health")[0] == 200 else 0
    in_flight = [r for r in results if r[0] <= killed_at <= r[1]]
    print(f"kill under load: {len(before_kill)} requests before, {len(in_flight)} in flight "
          f"({sum(not r[2] for r in in_flight)} failed), {len(after_kill)} started after ({len(failed)} failed); "
          f"survivor served {survivor_served:.0f}, the restarted replica {restarted_served:.0f}")
    assert survivor_served > 0 and survivor_served + restarted_served >= len(after_kill)

    # cluster.sh starts the replica again; the router's health checks take it back.
    deadline = time.time() + 240
    while time.time() < deadline:
        pid_now = cluster.replica_pid(1)
        if pid_now != victim and get(cluster.replicas[1] + "/health")[0] == 200:
            break
        time.sleep(0.5)
    else:
        pytest.fail("replica 1 was not started again:\n" + "".join(cluster.output))
    served_before = finished_requests(cluster.replicas[1])
    deadline = time.time() + 60
    while time.time() < deadline and finished_requests(cluster.replicas[1]) == served_before:
        out = cluster.client.completions.create(model="smollm2", prompt=PROMPTS[0], max_tokens=4, temperature=0)
        assert out.choices[0].text
    assert finished_requests(cluster.replicas[1]) > served_before, "the restarted replica was never routed to"
