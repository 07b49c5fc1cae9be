"""lm-eval (`local-completions`) against `tqserve serve`, f16 and tq4: a loglikelihood task and a
generation task defined in tests/lm_eval with local data (scripts/lm_eval.sh). f16 must know most
answers, and tq4 must score every item as f16 does (the same choice, log-likelihoods within a
small margin, mostly the same generated text), so a server that answered by chance would fail."""
import json
import subprocess
from pathlib import Path

import pytest

from conftest import BINARY, REPO, unsanitized_only
from server_process import ServerProcess

LM_EVAL = REPO / "build" / "lm-eval-venv" / "bin" / "lm_eval"
MC, GEN = "tqserve_facts_mc", "tqserve_capitals_gen"


def run_lm_eval(smollm2, mode, out):
    s = ServerProcess(BINARY, smollm2, "--kv-cache-dtype", mode, "--kv-cache-memory", "96MiB", "--max-model-len", "1024",
                      "--served-model-name", "smollm2")
    try:
        proc = subprocess.run(["bash", str(REPO / "scripts" / "lm_eval.sh"), s.url, "smollm2", str(out), "--log_samples"],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        m = s.wait_idle()
        assert m["tqserve:kv_cache_blocks_in_use"] == 0
    finally:
        assert s.stop() == 0
    results = json.loads(next(Path(out).rglob("results_*.json")).read_text())["results"]
    samples = {}
    for task in (MC, GEN):
        path = next(Path(out).rglob(f"samples_{task}_*.jsonl"))
        samples[task] = {d["doc_id"]: d for d in map(json.loads, path.read_text().splitlines())}
    return results, samples


@unsanitized_only("a client's compatibility and scores, not memory: the server's endpoints run sanitized in "
                  "test_server.py")
def test_lm_eval_tasks_run_against_the_server_and_tq4_scores_as_f16(smollm2, tmp_path):
    if not LM_EVAL.exists():
        pytest.fail(f"{LM_EVAL} is missing: scripts/setup.sh installs lm-eval")
    f16, f16_samples = run_lm_eval(smollm2, "f16", tmp_path / "f16")
    tq4, tq4_samples = run_lm_eval(smollm2, "tq4", tmp_path / "tq4")
    # 16 four-way questions (chance 0.25) and 8 capitals: SmolLM2-135M gets 0.56 and 0.88 in f16.
    assert f16[MC]["acc,none"] >= 0.4, f16
    assert f16[GEN]["exact_match,contains"] >= 0.6, f16

    assert f16_samples[MC].keys() == tq4_samples[MC].keys() and len(f16_samples[MC]) == 16
    for doc_id, a in f16_samples[MC].items():
        b = tq4_samples[MC][doc_id]
        ll_a = [float(r[0]) for r in a["filtered_resps"]]
        ll_b = [float(r[0]) for r in b["filtered_resps"]]
        assert len(ll_a) == len(ll_b) == 4, (a, b)
        # Unlikely continuations (-5 to -12 nats) move most under a quantized cache: 0.65 nats
        # at the most on these items (measured); a wrong or random score moves by several.
        for x, y in zip(ll_a, ll_b):
            assert abs(x - y) < 1.0, (doc_id, ll_a, ll_b)
        # The same choice wherever f16's is clear (a near-tie, 0.09 nats on one item, may flip).
        best, second = sorted(ll_a, reverse=True)[:2]
        if best - second > 0.5:
            assert ll_a.index(best) == ll_b.index(max(ll_b)), (doc_id, ll_a, ll_b)
    # The generated text itself (resps), not what the task's filter extracts from it.
    same = sum(f16_samples[GEN][i]["resps"] == tq4_samples[GEN][i]["resps"] for i in f16_samples[GEN])
    assert len(f16_samples[GEN]) == 8 and same >= 7, (f16_samples[GEN], tq4_samples[GEN])
    assert abs(tq4[MC]["acc,none"] - f16[MC]["acc,none"]) <= 1 / 16 + 1e-9, (f16, tq4)
