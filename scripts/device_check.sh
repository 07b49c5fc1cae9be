#!/usr/bin/env bash
# Runs on a lent GPU machine, from the repository root, with build/device-bundle carried
# (scripts/device_bundle.sh made it here): the CUDA parity tests, the attention kernel's timing
# beside torch's f16 SDPA on the same GPU, and end-to-end decode of a Qwen3-4B-shaped model with
# random bf16 weights made there with torch. Full outputs under $OUT; one JSON line printed last.
# Meant to finish in under 8 minutes; every stage has its own time limit and reports what it got.
# $OUT gets 7 files (the device tool returns at most 8).
# (gpu.txt, cuda_tests.json, cuda_tests.log, attention.log, torch.log, decode.log, serve.log)
#   device run: command "bash scripts/device_check.sh", carry ["build/device-bundle"], timeout_s 540
set -uo pipefail
cd "$(dirname "$0")/.."
BUNDLE=build/device-bundle
OUT=${OUT:-/tmp/tq-device-check}
mkdir -p "$OUT"
MODEL=${TQ_DEVICE_MODEL:-qwen3-4b}
log() { echo "[$(date +%T)] $*" >&2; }
# One deadline for the whole check (the device call's timeout_s is 540): each stage gets its own
# limit or what is left, less 20 s kept for the summary.
DEADLINE=$((SECONDS + ${TQ_CHECK_SECONDS:-500}))
limit() {
  local want=$1 left=$((DEADLINE - SECONDS - 20))
  ((left < want)) && want=$left
  ((want < 1)) && want=1
  echo "$want"
}
server=""
trap '[[ -n $server ]] && kill "$server" 2>/dev/null' EXIT

# cuBLAS from the machine: its CUDA toolkit, else the nvidia-cublas python package torch uses.
cublas_dir=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -e $d/libcublas.so.13 ]] && cublas_dir=$d && break
done
if [[ -z $cublas_dir ]]; then
  for sp in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    hit=$(find "$sp/nvidia" -name 'libcublas.so.13' -printf '%h\n' 2>/dev/null | head -1)
    [[ -n $hit ]] && cublas_dir=$hit && break
  done
fi
# Only the bundle's programs see the bundle's libraries: python and torch keep their own.
tq_libs="$PWD/$BUNDLE/lib${cublas_dir:+:$cublas_dir}"
bundled() { LD_LIBRARY_PATH="$tq_libs" "$@"; }
log "cuBLAS from ${cublas_dir:-nowhere}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv,noheader | tee "$OUT/gpu.txt" >&2

log "parity tests"
TQ_SOURCE_DIR=$PWD TQ_TESTDATA_DIR=$PWD/$BUNDLE/testdata bundled timeout "$(limit 200)" "$BUNDLE/bin/tq_cuda_tests" \
  --gtest_output="json:$OUT/cuda_tests.json" >"$OUT/cuda_tests.log" 2>&1
tests_rc=$?
tail -25 "$OUT/cuda_tests.log" >&2

log "attention kernel"
bundled timeout "$(limit 120)" "$BUNDLE/bin/bench_cuda_attention" 16:32768 64:8192 >"$OUT/attention.log" 2>&1
cat "$OUT/attention.log" >&2

log "torch f16 SDPA and copy bandwidth, same GPU"
timeout "$(limit 90)" python3 - >"$OUT/torch.log" 2>&1 <<'PY'
import json, torch
import torch.nn.functional as F
def median_ms(fn, n=20):
    for _ in range(3): fn()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]
src = torch.empty(2 << 30, dtype=torch.uint8, device="cuda").random_()
dst = torch.empty_like(src)
ms = median_ms(lambda: dst.copy_(src))
print(json.dumps({"bench": "copy", "tb_s": 2 * src.numel() / (ms * 1e-3) / 1e12}))
del src, dst
for batch, ctx in [(16, 32768), (64, 8192)]:
    q = torch.randn(batch, 40, 1, 128, dtype=torch.float16, device="cuda")
    k = torch.randn(batch, 8, ctx, 128, dtype=torch.float16, device="cuda")
    v = torch.randn_like(k)
    ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
    print(json.dumps({"bench": "torch_sdpa_f16", "batch": batch, "ctx": ctx, "us": ms * 1e3,
                      "tb_s": 2 * k.numel() * 2 / (ms * 1e-3) / 1e12}))
PY
cat "$OUT/torch.log" >&2

log "end to end: $MODEL shape, random bf16 weights"
model_dir=/tmp/tq-$MODEL
timeout "$(limit 150)" python3 bench/make_hf_model "$MODEL" "$model_dir" --tokenizer "$BUNDLE/testdata/qwen2-tokenizer" \
  >"$OUT/decode.log" 2>&1 || log "make_hf_model failed"
bundled timeout "$(limit 150)" "$BUNDLE/bin/tqserve" bench decode -m "$model_dir" --device cuda --modes f16 \
  --contexts 512,4096 --new-tokens 32 --json >>"$OUT/decode.log" 2>&1
cat "$OUT/decode.log" >&2

log "serving: concurrency 64, 512-token prompts, 128-token outputs"
port=18731
bundled "$BUNDLE/bin/tqserve" serve -m "$model_dir" --device cuda --port "$port" --kv-cache-memory 24GiB \
  >"$OUT/serve.log" 2>&1 &
server=$!
while ((SECONDS < DEADLINE - 60)); do
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || break
  sleep 1
done
bundled timeout "$(limit 120)" "$BUNDLE/bin/tqserve" bench serve --url "http://127.0.0.1:$port" --num-prompts 128 \
  --concurrency 64 --input-len 512 --output-len 128 --json >>"$OUT/serve.log" 2>&1
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
server=""
tail -5 "$OUT/serve.log" >&2

python3 - "$OUT" "$tests_rc" "$model_dir" <<'PY'
import json, os, sys
out, tests_rc, model_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def lines(name):
    try:
        return [json.loads(l) for l in open(os.path.join(out, name)) if l.strip().startswith("{")]
    except (OSError, ValueError):
        return []
summary = {"gpu": open(os.path.join(out, "gpu.txt")).read().strip() if os.path.exists(os.path.join(out, "gpu.txt")) else None,
           "tests_rc": tests_rc}
try:
    t = json.load(open(os.path.join(out, "cuda_tests.json")))
    summary["tests"] = {"total": t["tests"], "failures": t["failures"], "errors": t.get("errors", 0),
                        "skipped": sum(c.get("result") == "SKIPPED" for s in t["testsuites"] for c in s["testsuite"]),
                        "failed": [c["name"] for s in t["testsuites"] for c in s["testsuite"] if c.get("failures")]}
except (OSError, ValueError, KeyError):
    summary["tests"] = None
summary["attention"] = lines("attention.log")
summary["torch"] = lines("torch.log")
decode = [r for r in lines("decode.log") if "rows" in r]
serve = [r for r in lines("serve.log") if "output_throughput" in r or "output_tok_s" in r]
summary["serve"] = serve[0] if serve else None
summary["decode"] = decode[0]["rows"] if decode else None
weights = os.path.getsize(os.path.join(model_dir, "model.safetensors")) if os.path.exists(os.path.join(model_dir, "model.safetensors")) else 0
copy = [r["tb_s"] for r in summary["torch"] if r.get("bench") == "copy"]
if decode and weights and copy:
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    kv_per_token = cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * 2 * 2  # f16 K and V
    for r in summary["decode"]:  # a decode step reads every weight once and the context's K and V
        r["read_gb_s"] = (weights + kv_per_token * r["ctx"]) * r["decode_tok_s"] / 1e9
        r["of_copy_bandwidth"] = r["read_gb_s"] / (copy[0] * 1e3)
print(json.dumps(summary))
PY
