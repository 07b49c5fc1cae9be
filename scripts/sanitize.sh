#!/usr/bin/env bash
# Builds everything with AddressSanitizer + UndefinedBehaviorSanitizer (GCC, -DTQ_SANITIZE=ON) into
# build-asan/ and runs the whole test suite against it: ctest on build-asan, then the end-to-end
# pytest suite with TQSERVE_BIN=build-asan/tqserve. Any sanitizer report fails the run (UBSan
# does not recover; ASan and LeakSanitizer abort / exit nonzero, which the tests see as a failure).
# The one test skipped under ASan (GgufDeathTest.OutOfMemoryForAnArrayIsAnError) says why.
#
#   scripts/sanitize.sh [PYTEST ARGS...]      e.g. scripts/sanitize.sh -k server (default: all of it)
# CI runs it whole (scripts/test.sh with TQ_HARDENING=1): on the 2-core Intel VM of session 7 the
# end-to-end suite took 12 min under the sanitizers, ctest under 3.
# The soak tests see TQ_SANITIZER and report RSS without judging it (ASan's quarantine keeps freed
# memory on purpose); LeakSanitizer checks leaks when each server exits.
# Environment: TQ_ASAN_BUILD (build folder, default build-asan), TQ_ASAN_JOBS (build/ctest jobs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${TQ_ASAN_BUILD:-build-asan}
PYTEST_ARGS=(tests/python "$@")
JOBS=${TQ_ASAN_JOBS:-$(nproc)}
start=$(date +%s)

if ! grep -q '^TQ_SANITIZE:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTQ_SANITIZE=ON >/dev/null
fi
# The build log goes to a file: GCC's -Wmaybe-uninitialized misfires by the hundred under
# -fsanitize=address (the normal build keeps those warnings meaningful).
echo "sanitize.sh: building $BUILD (log: $BUILD/build.log)"
if ! cmake --build "$BUILD" -j "$JOBS" --target tq_tests tqserve >"$BUILD/build.log" 2>&1; then
  grep -E -A5 'error|FAILED' "$BUILD/build.log" | head -60 >&2
  echo "sanitize.sh: the build failed (full log: $BUILD/build.log)" >&2
  exit 1
fi
built=$(date +%s)

SUPP="$PWD/scripts/sanitizer-suppressions"
# detect_leaks: on (LeakSanitizer); the suppressions name third-party libraries only.
# max_uar_stack_size_log=16: a 64 KiB fake stack per thread for use-after-return detection instead
# of 1 MiB (deeper frames fall back to the real stack): every throw sweeps it (scripts/fuzz.sh), and
# the soak's 500 HTTP threads each get one.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=1:max_uar_stack_size_log=16:strict_string_checks=1:check_initialization_order=1}"
export TQ_SANITIZER=asan+ubsan
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$SUPP/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$SUPP/ubsan.supp}"

# Sanitized code runs several times slower: ctest gets a longer per-test timeout than its default.
status=0
nice -n 10 ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" --timeout 3000 || status=1
ctest_done=$(date +%s)
TQSERVE_BIN="$PWD/$BUILD/tqserve" nice -n 10 python3 -m pytest -q "${PYTEST_ARGS[@]}" || status=1
end=$(date +%s)

echo "sanitize.sh: build $((built - start))s, ctest $((ctest_done - built))s, pytest $((end - ctest_done))s, total $((end - start))s"
[ $status -eq 0 ] || echo "sanitize.sh: FAILED under ASan+UBSan (see the reports above)" >&2
exit $status
