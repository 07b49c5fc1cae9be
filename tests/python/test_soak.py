"""The soak (scripts/soak.py) in its CI length: 30 s of 200 streaming clients (16 under the sanitizers; 30 % dropped
mid-stream) per KV mode (tq4 alone under the sanitizers), then no 5xx, every block back, the block pool and prefix cache
consistent, greedy outputs unchanged, RSS flat after warm-up. The 10-minute run is in
docs/SOAK.md. Also: the idle-time consistency check the soak relies on is exported in /metrics."""
import json
import os
import subprocess
import sys

import pytest

from conftest import BINARY, REPO, unsanitized_only
from server_process import ServerProcess


def test_idle_consistency_check_is_exported(smollm2):
    s = ServerProcess(BINARY, smollm2, "--kv-cache-memory", "64MiB", "--max-model-len", "1024")
    try:
        before = s.wait_idle()
        assert before["tqserve:kv_cache_consistent"] == 1
        for _ in range(2):
            status, body = s.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4})
            assert status == 200, body
        m = s.wait_idle()
        assert m["tqserve:kv_cache_consistent"] == 1
        # The engine fell idle after each request and checked the pool each time.
        assert m["tqserve:kv_cache_consistency_checks_total"] >= before["tqserve:kv_cache_consistency_checks_total"] + 2
        assert m["tqserve:kv_cache_blocks_in_use"] == 0
    finally:
        assert s.stop() == 0, "".join(s.log)


@pytest.mark.parametrize("mode", [
    pytest.param("f16", marks=unsanitized_only(
        "the sanitized run soaks tq4 alone (2 min under ASan): the same server paths, plus the quantized "
        "cache's; the FP cache runs sanitized in the other server tests")),
    "tq4"])
def test_soak_30s(mode, smollm2):
    # Under scripts/sanitize.sh (TQ_SANITIZER set) ASan's quarantine holds freed memory on purpose,
    # so RSS says nothing about leaks there; LeakSanitizer checks them when the server exits, and
    # soak.py fails on the server's nonzero exit status. ASan and UBSan make prefill 10-20x slower
    # (tq4 at 1000 tokens: ~72 tokens/s), so 200 clients' prompts are not all prefilled once in
    # the main phase and a run could complete no request at all. The sanitized run checks memory and
    # UB under the same request mix with 16 clients (measured: 9 completed, 5 dropped, 46 requests);
    # the plain build keeps 200.
    sanitized = bool(os.environ.get("TQ_SANITIZER"))
    extra = ["--no-rss-limit", "--clients", "16"] if sanitized else []
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "soak.py"), "--duration", "30", "--kv-cache-dtype",
                           mode, "--server-bin", str(BINARY), "--model", smollm2, "--json", *extra],
                          capture_output=True, text=True, timeout=900)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    assert report["ok"] and report["mode"] == mode
    assert report["blocks_in_use"] == 0 and report["consistent"] == 1
    assert report["requests"] > report["clients"]  # clients came back for more
