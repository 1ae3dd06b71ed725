#!/usr/bin/env bash
# 4 hosts x 4 ranks (network namespaces on one bridge, bench/cluster_netns.sh), one dpxrun agent
# per host, the example on the hierarchical backend for a few steps: every agent succeeds and all
# 16 replicas end with the same weights to the bit (the example checks and says so).
#   four_by_four.sh <dpxrun> <fashion_mnist> <scratch dir>
set -uo pipefail
dpxrun=$1 bin=$2 work=$3
source "$(dirname "$0")/../example/dataset.sh" "$work"
cluster="$(dirname "$0")/../../../bench/cluster_netns.sh"
cd "$work"
LAUNCHER=$dpxrun OUT="$work/logs" TIMEOUT=240 bash "$cluster" 4 4 "$bin" --backend hierarchical \
  --epochs 1 --train-limit 1024 --batch-size 8 --max-steps 6
status=$?
[ $status = 77 ] && { echo "four_by_four: SKIPPED (network namespaces cannot be made here)"; exit 0; }
fail() { echo "four_by_four: FAILED: $*"; cat logs/status; tail -n 15 logs/host*.log; exit 1; }
[ $status = 0 ] || fail "an agent failed"
grep -q '"type":"replicas","ranks":16,"identical":true' fashion_mnist_metrics.jsonl ||
  fail "no record of 16 identical replicas in the metrics"
grep -h "weights identical" logs/host*.log
echo "four_by_four: PASS"
