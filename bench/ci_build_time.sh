#!/usr/bin/env bash
# CI's build budget (docs/ci.md): builds dpx from nothing with no compiler cache, against each
# LibTorch installed, with the targets scripts/test.sh builds there, and times each build.
# Exits 1 when a build takes longer than its budget, so a change that slows CI's fresh-cache
# build is seen here before CI meets it (CI stops at 90 minutes; its goal is 45 in all).
#   bench/ci_build_time.sh [VERSION...]     (default: every LibTorch installed)
#   env: BUDGET_2_15 BUDGET_2_11 BUDGET_1_13  seconds (defaults below: 1.5x what docs/ci.md
#        measured, the spread of this machine's speed from day to day)
# Each build goes to a fresh folder, removed at the end however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/torch.sh
declare -A budget=([2.15]="${BUDGET_2_15:-660}" [2.11]="${BUDGET_2_11:-405}"
                   [1.13]="${BUDGET_1_13:-540}")
versions=("$@")
((${#versions[@]} > 0)) || mapfile -t versions < <(torch_versions)
scratch=$(mktemp -d /tmp/dpx-ci-build-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
over=0
for v in "${versions[@]}"; do
  read -ra targets <<<"$(ci_targets "$v")"
  start=$(date +%s)
  DPX_BUILD_DIR="$scratch/$v" CCACHE_DISABLE=1 bash scripts/build.sh "$v" \
    ${targets[@]+"${targets[@]}"} >"$scratch/$v.log" 2>&1 ||
    { tail -n 30 "$scratch/$v.log"; echo "ci_build_time: the build against $v failed"; exit 1; }
  took=$(($(date +%s) - start))
  steps=$(($(wc -l <"$scratch/$v/.ninja_log") - 1))
  echo "LibTorch $v: ${took} s for ${steps} steps (budget ${budget[$v]} s)${targets[*]:+; targets: ${targets[*]}}"
  echo "  slowest steps (seconds):"
  awk 'NR > 1 {printf "  %7.1f  %s\n", ($2 - $1) / 1000, $4}' "$scratch/$v/.ninja_log" |
    sort -rn | head -n 8
  if ((took > budget[$v])); then
    echo "ci_build_time: OVER BUDGET: LibTorch $v took ${took} s, its budget is ${budget[$v]} s"
    over=1
  fi
  rm -rf "${scratch:?}/$v"
done
exit "$over"
