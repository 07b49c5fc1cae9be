#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan + UBSan) into build-fuzz/ and runs each for a
# while, starting from a scratch copy of its committed seeds in fuzz/corpus/<target>/ (so the
# committed corpus never grows).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, all targets)
#   targets: gguf safetensors request tokenizer chat_template
#
# Prints, per target, the executions (libFuzzer's stat::number_of_executed_units) and whether it
# crashed; exits nonzero when any target crashed (a crash, sanitizer report, uncaught exception,
# broken harness invariant, timeout or out-of-memory). Crashing inputs are kept in
# build-fuzz/fuzz-artifacts/<target>/; reproduce one with build-fuzz/fuzz/fuzz_<target> FILE.
# Environment: TQ_FUZZ_BUILD (build folder, default build-fuzz), TQ_FUZZ_JOBS (build jobs, default 2),
# TQ_FUZZ_KEEP_CORPUS=DIR (copy each grown corpus to DIR/<target> for inspection),
# TQ_FUZZ_PARALLEL=N (run N targets at once, one core each; default 1),
# TQ_FUZZ_RUNS=N (stop a target after N executions, if that comes before SECONDS_PER_TARGET),
# TQ_FUZZ_WORKERS=N (fuzz each target with N libFuzzer processes sharing one corpus, as libFuzzer's
# -jobs does; each reloads the units the others add; TQ_FUZZ_RUNS is split evenly between them; default 1).
# A long run to 10 M executions each, two at a time:
#   TQ_FUZZ_PARALLEL=2 TQ_FUZZ_RUNS=10000000 scripts/fuzz.sh 14400
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_TARGET=${1:-60}
[ $# -gt 0 ] && shift
ALL_TARGETS=(gguf safetensors request tokenizer chat_template structured_output)
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL_TARGETS[@]}")
for t in "${TARGETS[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (targets: ${ALL_TARGETS[*]})" >&2; exit 2; }
done
BUILD=${TQ_FUZZ_BUILD:-build-fuzz}
# fuzz_tokenizer and fuzz_chat_template read the shared test data (tokenizers, real templates); a
# clone without it skips them, as the test suites skip what needs it.
TESTDATA=${TQ_TESTDATA:-$PWD/../shared/testdata}
if [ ! -d "$TESTDATA" ]; then
  kept=()
  for t in "${TARGETS[@]}"; do
    case "$t" in
      tokenizer|chat_template) echo "fuzz.sh: skipping $t: needs the shared test data, not found at $TESTDATA" ;;
      *) kept+=("$t") ;;
    esac
  done
  TARGETS=("${kept[@]}")
  [ ${#TARGETS[@]} -gt 0 ] || { echo "fuzz.sh: nothing left to run"; exit 0; }
fi

# libFuzzer and the sanitizer runtimes come with clang's runtime package; OpenMP under clang is libomp.
FUZZ_PACKAGES=(clang libclang-rt-14-dev libomp-14-dev)
missing=()
for p in "${FUZZ_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "fuzz.sh: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! grep -q '^TQ_FUZZ:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DTQ_FUZZ=ON >/dev/null
fi
build_targets=()
for t in "${TARGETS[@]}"; do build_targets+=("fuzz_$t"); done
echo "fuzz.sh: building ${build_targets[*]} in $BUILD"
if ! cmake --build "$BUILD" -j "${TQ_FUZZ_JOBS:-2}" --target "${build_targets[@]}" >"$BUILD/build.log" 2>&1; then
  grep -E -A5 'error|FAILED' "$BUILD/build.log" | head -60 >&2
  echo "fuzz.sh: the build failed (full log: $BUILD/build.log)" >&2
  exit 1
fi

# Leak reports are wanted for our code; OpenMP's runtime keeps thread state alive at exit, which
# the suppressions file (one commented entry per third-party library) silences.
# max_uar_stack_size_log=16: the harnesses throw on most inputs, and every throw makes ASan sweep
# the fake stack it keeps for use-after-return detection; at the default 1 MiB (log 20) that sweep
# took 62 % of fuzz_gguf's time (perf). 64 KiB keeps the detection (deeper frames fall back to the
# real stack) and runs about 3 times as many executions per second.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=0:detect_stack_use_after_return=1:max_uar_stack_size_log=16:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$PWD/scripts/sanitizer-suppressions/lsan.supp:print_suppressions=0}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1  # one core per fuzzer; threads only add noise

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
WORKERS=${TQ_FUZZ_WORKERS:-1}
RUNS_LIMIT=()
[ -n "${TQ_FUZZ_RUNS:-}" ] && RUNS_LIMIT=("-runs=$(((TQ_FUZZ_RUNS + WORKERS - 1) / WORKERS))")

# Runs one target; leaves its one-line summary in $work/$t.summary and exits nonzero on a crash.
run_target() {
  local t=$1
  local corpus="$work/$t" artifacts="$BUILD/fuzz-artifacts/$t" log="$BUILD/fuzz-logs/$t.log" logs=()
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  cp -r "fuzz/corpus/$t/." "$corpus/"
  local dict=()
  [ -f "fuzz/dict/$t.dict" ] && dict=("-dict=fuzz/dict/$t.dict")
  echo "fuzz.sh: fuzz_$t for ${SECONDS_PER_TARGET}s${TQ_FUZZ_RUNS:+ or $TQ_FUZZ_RUNS executions}, $WORKERS worker(s) (log: $log)"
  local start=$SECONDS rc=0 w worker_pids=()
  for ((w = 1; w <= WORKERS; w++)); do
    logs+=("$log")
    nice -n 10 "$BUILD/fuzz/fuzz_$t" "$corpus" "${dict[@]}" -max_total_time="$SECONDS_PER_TARGET" "${RUNS_LIMIT[@]}" \
      -rss_limit_mb=2560 -timeout=25 -max_len=16384 -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 &
    worker_pids+=($!)
    log="$BUILD/fuzz-logs/$t.worker$((w + 1)).log"
  done
  local running=("${worker_pids[@]}") finished status  # the first worker to fail stops the others
  while [ ${#running[@]} -gt 0 ]; do
    status=0
    wait -n -p finished "${running[@]}" || status=$?
    local still=() pid
    for pid in "${running[@]}"; do [ "$pid" = "$finished" ] || still+=("$pid"); done
    running=("${still[@]}")
    if [ "$status" -ne 0 ] && [ "$rc" -eq 0 ]; then
      rc=$status
      kill "${running[@]}" 2>/dev/null || true
    fi
  done
  local took=$((SECONDS - start))
  local execs="" units count
  log=${logs[0]}
  for w in "${logs[@]}"; do  # the sum over the workers; '?' if one printed no final stats
    count=$(grep -a -o 'stat::number_of_executed_units: *[0-9]*' "$w" | tail -1 | grep -o '[0-9]*$' || true)
    [ "$rc" -ne 0 ] && [ -z "$count" ] && continue
    [ -z "$count" ] && { execs="?"; break; }
    execs=$((${execs:-0} + count))
    [ "$rc" -ne 0 ] && grep -a -q -E 'ERROR: |runtime error: |fuzz invariant violated|deadly signal' "$w" && log=$w
  done
  units=$(find "$corpus" -type f | wc -l)
  if [ -n "${TQ_FUZZ_KEEP_CORPUS:-}" ]; then mkdir -p "$TQ_FUZZ_KEEP_CORPUS/$t" && cp -r "$corpus/." "$TQ_FUZZ_KEEP_CORPUS/$t/"; fi
  if [ $rc -ne 0 ]; then
    printf '%-14s %12s executions in %6ss  %5s corpus units  CRASH (exit %d): %s\n' "$t" "${execs:-?}" "$took" "$units" "$rc" \
      "$(grep -a -o -m1 -E 'ERROR: [A-Za-z]+: [^ ]+( [^ ]+)?|runtime error: .*|fuzz invariant violated: .*|deadly signal|Test unit written to .*' "$log" | head -1)" \
      >"$work/$t.summary"
    echo "---- fuzz_$t failed; end of $log:"
    tail -40 "$log"
    return 1
  fi
  printf '%-14s %12s executions in %6ss  %5s corpus units  ok\n' "$t" "${execs:-?}" "$took" "$units" >"$work/$t.summary"
}

# TQ_FUZZ_PARALLEL targets at a time (default 1: each fuzzer has the machine to itself).
PARALLEL=${TQ_FUZZ_PARALLEL:-1}
failed=()
pids=()
names=()
reap_one() {
  local pid=${pids[0]} name=${names[0]}
  pids=("${pids[@]:1}")
  names=("${names[@]:1}")
  wait "$pid" || failed+=("$name")
}
for t in "${TARGETS[@]}"; do
  [ ${#pids[@]} -ge "$PARALLEL" ] && reap_one
  run_target "$t" &
  pids+=($!)
  names+=("$t")
done
while [ ${#pids[@]} -gt 0 ]; do reap_one; done

echo "fuzz.sh: ${SECONDS_PER_TARGET}s per target${TQ_FUZZ_RUNS:+ (at most $TQ_FUZZ_RUNS executions)}, $PARALLEL at a time"
for t in "${TARGETS[@]}"; do printf '  %s' "$(cat "$work/$t.summary" 2>/dev/null || echo "$t: no summary")"; echo; done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: CRASHES in ${failed[*]} (inputs in $BUILD/fuzz-artifacts/)" >&2
  exit 1
fi
