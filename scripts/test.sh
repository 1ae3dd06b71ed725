#!/usr/bin/env bash
# The whole test suite: setup, build, then every CTest tier (unit, multirank, multiproc, scripts).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
