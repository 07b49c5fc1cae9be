#!/usr/bin/env bash
# Runs every test: the C++ suite (ctest) and the end-to-end suite (pytest) against build/.
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir build --output-on-failure -j "$(nproc)"
python3 -m pytest -q tests/python
# Hardening (opt-in until its CI time is measured on a fresh machine): the whole suite again under
# ASan + UBSan (build-asan/), then a short run of every fuzzer (build-fuzz/, 30 s each).
if [ "${TQ_HARDENING:-0}" = 1 ]; then
  bash scripts/sanitize.sh
  bash scripts/fuzz.sh 30
fi
