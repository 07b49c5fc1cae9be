#!/usr/bin/env bash
# The policy comparison of docs/SCALE_OUT.md: for each router policy, scripts/cluster.sh 2 with
# SmolLM2 (f16, 100 MiB of KV per replica: room for about half of 8 groups of ~1k-token prefixes),
# then bench/cluster_prefix.py (160 streamed requests, concurrency 4), then the cluster stopped.
#   bench/cluster_policies.sh MODEL.gguf [cluster_prefix.py flags, e.g. --prefix-words 860]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL="${1:?usage: bench/cluster_policies.sh MODEL.gguf [cluster_prefix.py flags]}"
shift
for policy in round_robin cache_aware kv_aware; do
  scripts/cluster.sh 2 --policy "$policy" --port 18400 --replica-port 18021 --events-port 15611 \
    --router-metrics-port 18490 -- "$MODEL" --kv-cache-memory 100MiB --max-model-len 2048 \
    --served-model-name smollm2 > "build/cluster/$policy.out" 2>&1 &
  cluster=$!
  for _ in $(seq 1 180); do grep -q "behind vllm-router" "build/cluster/$policy.out" 2>/dev/null && break; sleep 1; done
  grep -q "behind vllm-router" "build/cluster/$policy.out" || { cat "build/cluster/$policy.out" >&2; exit 1; }
  echo "== $policy"
  python3 bench/cluster_prefix.py --router http://127.0.0.1:18400 \
    --replicas http://127.0.0.1:18021 http://127.0.0.1:18022 "$@" | tail -1
  kill -TERM "$cluster"
  wait "$cluster" || true
done
