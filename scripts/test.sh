#!/usr/bin/env bash
# Runs every test: the C++ suite (ctest) and the end-to-end suite (pytest) against build/.
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir build --output-on-failure -j "$(nproc)"
python3 -m pytest -q tests/python
# Hardening, with TQ_HARDENING=1 (.ci/run sets it): both suites again under ASan + UBSan
# (build-asan/, scripts/sanitize.sh), then a 30-second run of every fuzzer (build-fuzz/, clang's
# libFuzzer).
if [ "${TQ_HARDENING:-0}" != 0 ]; then
  bash scripts/sanitize.sh
  bash scripts/fuzz.sh 30
fi
