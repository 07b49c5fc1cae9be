#!/usr/bin/env bash
# N tqserve replicas behind vllm-router (the pinned one scripts/setup.sh installs into
# build/router-venv), on this machine:
#
#   scripts/cluster.sh N [--policy round_robin|cache_aware|kv_aware] [--port 8100] [--replica-port 8001]
#                        [--events-port 5557] [--router-metrics-port 29000] [--health-check-interval 2]
#                        [-- tqserve serve flags...]
#
# Replica i serves on --replica-port + i, pinned to its share of the cores (taskset), with
# --threads set to that share, and publishes its KV cache events on tcp://127.0.0.1:(--events-port + i)
# (the router's kv_aware policy finds them through /kv_event_sources). The router listens on
# --port, its Prometheus metrics on --router-metrics-port; it checks each replica's /health every
# --health-check-interval seconds. A replica that exits (killed, crashed) is started again on the
# same ports, as a Kubernetes restart policy would; its fresh event stream begins with
# AllBlocksCleared and the router sends to it again once its health checks pass. The script runs
# until SIGINT or SIGTERM, then stops the router and every replica (each finishes what it is
# serving) and exits 0; if a replica fails to start or the router exits, everything started is
# stopped and the script exits 1.
# Logs: build/cluster/replica-<i>.log (appended across restarts), build/cluster/router.log;
# build/cluster/replica-<i>.pid holds the running replica's process id.
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
TQSERVE="${TQSERVE_BIN:-$REPO/build/tqserve}"
ROUTER="$REPO/build/router-venv/bin/vllm-router"

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 1 ] || usage
N="$1"; shift
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "cluster.sh: N must be a positive number of replicas, got '$N'" >&2; exit 2; }
POLICY=cache_aware PORT=8100 REPLICA_PORT=8001 EVENTS_PORT=5557 METRICS_PORT=29000 HEALTH_INTERVAL=2
SERVE_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --policy) POLICY="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --replica-port) REPLICA_PORT="$2"; shift 2 ;;
    --events-port) EVENTS_PORT="$2"; shift 2 ;;
    --router-metrics-port) METRICS_PORT="$2"; shift 2 ;;
    --health-check-interval) HEALTH_INTERVAL="$2"; shift 2 ;;
    --) shift; SERVE_ARGS=("$@"); break ;;
    *) echo "cluster.sh: unknown option '$1'" >&2; usage ;;
  esac
done
case "$POLICY" in round_robin|cache_aware|kv_aware|power_of_two|random) ;;
  *) echo "cluster.sh: --policy '$POLICY' is not one of round_robin, cache_aware, kv_aware, power_of_two, random" >&2; exit 2 ;;
esac
[ -x "$TQSERVE" ] || { echo "cluster.sh: $TQSERVE not built (bash scripts/setup.sh)" >&2; exit 1; }
[ -x "$ROUTER" ] || { echo "cluster.sh: $ROUTER missing (bash scripts/setup.sh installs vllm-router)" >&2; exit 1; }

LOGS="$REPO/build/cluster"
mkdir -p "$LOGS"
CORES=$(nproc)
PIDS=()
ROUTER_PID=""

stop_all() {
  [ -n "$ROUTER_PID" ] && kill -TERM "$ROUTER_PID" 2>/dev/null || true
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  [ -n "$ROUTER_PID" ] && wait "$ROUTER_PID" 2>/dev/null || true
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap 'stop_all; exit 0' INT TERM

wait_healthy() {  # url, pid, what
  for _ in $(seq 1 600); do
    kill -0 "$2" 2>/dev/null || return 1
    curl -sf -o /dev/null "$1/health" && return 0
    sleep 0.5
  done
  return 1
}

WORKERS=()
start_replica() {  # i: starts replica i in the background, records its pid
  local i=$1
  # Replica i gets cores [first, first + share) of the machine; with more replicas than cores
  # they share cores round-robin.
  local share=$(( CORES / N > 0 ? CORES / N : 1 ))
  local first=$(( (i * share) % CORES ))
  taskset -c "$first-$(( first + share - 1 ))" "$TQSERVE" serve --host 127.0.0.1 \
    --port "$(( REPLICA_PORT + i ))" --threads "$share" \
    --kv-events-endpoint "tcp://127.0.0.1:$(( EVENTS_PORT + i ))" "${SERVE_ARGS[@]}" \
    >> "$LOGS/replica-$i.log" 2>&1 &
  PIDS[$i]=$!
  echo "${PIDS[$i]}" > "$LOGS/replica-$i.pid"
}
for ((i = 0; i < N; i++)); do
  : > "$LOGS/replica-$i.log"
  start_replica "$i"
  WORKERS+=("http://127.0.0.1:$(( REPLICA_PORT + i ))")
done
for ((i = 0; i < N; i++)); do
  if ! wait_healthy "${WORKERS[$i]}" "${PIDS[$i]}"; then
    echo "cluster.sh: replica $i did not start (log: $LOGS/replica-$i.log):" >&2
    tail -5 "$LOGS/replica-$i.log" >&2
    stop_all
    exit 1
  fi
done
"$ROUTER" --host 127.0.0.1 --port "$PORT" --prometheus-port "$METRICS_PORT" --policy "$POLICY" \
  --health-check-interval-secs "$HEALTH_INTERVAL" --worker-urls "${WORKERS[@]}" > "$LOGS/router.log" 2>&1 &
ROUTER_PID=$!
for _ in $(seq 1 120); do
  curl -sf -o /dev/null "http://127.0.0.1:$PORT/health" && break
  kill -0 "$ROUTER_PID" 2>/dev/null || { echo "cluster.sh: vllm-router exited (log: $LOGS/router.log)" >&2; stop_all; exit 1; }
  sleep 0.5
done
echo "cluster.sh: $N replicas (${WORKERS[*]}) behind vllm-router ($POLICY) on http://127.0.0.1:$PORT"
# Supervise: restart a replica that exits; stop everything if the router exits.
while kill -0 "$ROUTER_PID" 2>/dev/null; do
  for ((i = 0; i < N; i++)); do
    if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
      status=0; wait "${PIDS[$i]}" 2>/dev/null || status=$?
      echo "cluster.sh: replica $i exited (status $status); starting it again" >&2
      start_replica "$i"
    fi
  done
  sleep 0.5
done
echo "cluster.sh: vllm-router exited (log: $LOGS/router.log); stopping the replicas" >&2
ROUTER_PID=""
stop_all
exit 1
