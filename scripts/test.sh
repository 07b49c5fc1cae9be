#!/usr/bin/env bash
# Runs every test: the C++ suite (ctest) and the end-to-end suite (pytest) against build/.
set -euo pipefail
cd "$(dirname "$0")/.."
ctest --test-dir build --output-on-failure -j "$(nproc)"
python3 -m pytest -q tests/python
