#!/usr/bin/env bash
# scripts/gpu_check.sh where no GPU is: `plan` fits its deadline, and `all` fails at once with
# one line (an nvidia-smi that lists nothing stands in for a machine without a GPU).
set -euo pipefail
src=$1
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
printf '#!/bin/sh\nexit 9\n' >"$fake/nvidia-smi"
chmod +x "$fake/nvidia-smi"
plan=$(bash "$src/scripts/gpu_check.sh" plan)
echo "$plan"
grep -q "budgets add up to" <<<"$plan"
if GPU_CHECK_SECONDS=100 bash "$src/scripts/gpu_check.sh" plan >/dev/null 2>&1; then
  echo "FAIL: a 100 s deadline was accepted for budgets that exceed it"; exit 1
fi
status=0
out=$(PATH="$fake:$PATH" bash "$src/scripts/gpu_check.sh" all "$fake/results" 2>&1) || status=$?
echo "$out"
[ "$status" = 1 ] || { echo "FAIL: exit $status without a GPU, expected 1"; exit 1; }
[ "$(wc -l <<<"$out")" = 1 ] || { echo "FAIL: more than one line without a GPU"; exit 1; }
grep -q "no NVIDIA GPU here" <<<"$out" || { echo "FAIL: the line does not say there is no GPU"; exit 1; }
[ ! -e "$fake/results" ] || { echo "FAIL: results written without a GPU"; exit 1; }
echo "PASS"
