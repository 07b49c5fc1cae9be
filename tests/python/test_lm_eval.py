"""lm-eval (`local-completions`) against `tqserve serve`, f16 and tq4: a loglikelihood task and a
generation task defined in tests/lm_eval with local data (scripts/lm_eval.sh)."""
import json
import subprocess
from pathlib import Path

import pytest

from conftest import BINARY, REPO
from server_process import ServerProcess

LM_EVAL = REPO / "build" / "lm-eval-venv" / "bin" / "lm_eval"


@pytest.mark.parametrize("mode", ["f16", "tq4"])
def test_lm_eval_tasks_run_against_the_server(smollm2, mode, tmp_path):
    if not LM_EVAL.exists():
        pytest.fail(f"{LM_EVAL} is missing: scripts/setup.sh installs lm-eval")
    s = ServerProcess(BINARY, smollm2, "--kv-cache-dtype", mode, "--kv-cache-memory", "96MiB", "--max-model-len", "1024",
                      "--served-model-name", "smollm2")
    try:
        proc = subprocess.run(["bash", str(REPO / "scripts" / "lm_eval.sh"), s.url, "smollm2", str(tmp_path)],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        results = json.loads(next(Path(tmp_path).rglob("results_*.json")).read_text())["results"]
        mc = results["tqserve_facts_mc"]["acc,none"]
        gen = results["tqserve_capitals_gen"]["exact_match,contains"]
        # 16 four-way questions (chance 0.25) and 8 capitals: SmolLM2-135M gets 0.56 and 0.88 in f16.
        assert mc >= 0.4, results
        assert gen >= 0.6, results
        m = s.wait_idle()
        assert m["tqserve:kv_cache_blocks_in_use"] == 0
    finally:
        assert s.stop() == 0
