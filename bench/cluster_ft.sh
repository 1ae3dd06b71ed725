#!/usr/bin/env bash
# Fault-tolerant training against today's restart, on 4 network-namespace hosts x 2 ranks
# (tests/scripts/cluster/fault_tolerant.sh, which records each run in summary.json):
#   1. accuracy: three runs without a failure (seeds 1-3) and one with a host killed (seed 1);
#   2. chaos: KILLS kills in one training, --fault-tolerant against restart-from-checkpoint
#      (--nnodes 4, checkpoints every 10 steps), each also run without a kill for its baseline.
# Prints one JSON line per run and writes them to OUT/runs.jsonl (docs/performance.md).
#   bench/cluster_ft.sh [OUT]      environment: EPOCHS (2), TRAIN_LIMIT (60000), KILLS (10),
#   RUNS (the runs to make, by name; default all)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$(mktemp -d /tmp/dpx-cluster-ft-XXXXXX)}
mkdir -p "$out"
touch "$out/runs.jsonl"
run() {  # NAME ENV...: one run, its summary appended
  local name=$1
  shift
  [ -z "${RUNS:-}" ] || [[ " $RUNS " == *" $name "* ]] || return 0
  env "$@" EPOCHS="${EPOCHS:-2}" TRAIN_LIMIT="${TRAIN_LIMIT:-60000}" SEED=7 \
    bash "$here/tests/scripts/cluster/fault_tolerant.sh" "$here/build/tools/dpxrun/dpxrun" \
    "$here/build/examples/fashion_mnist/fashion_mnist" "$out/$name" > "$out/$name.log" 2>&1
  local s=$?
  python3 - "$name" "$s" "$out/$name/summary.json" <<'PY' | tee -a "$out/runs.jsonl"
import json, sys
name, status, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    r = json.load(open(path))
except OSError:
    r = {}
r.update(run=name, status=status)
print(json.dumps(r))
PY
}
for seed in 1 2 3; do run "clean_seed$seed" KILLS=0 EXAMPLE_ARGS="--seed $seed"; done
for seed in 1 2 3; do run "one_kill_seed$seed" KILLS=1 EXAMPLE_ARGS="--seed $seed"; done
run "restart_clean" MODE=restart KILLS=0 EXAMPLE_ARGS="--seed 1"
run "ft_chaos" KILLS="${KILLS:-10}" GAP=2 EXAMPLE_ARGS="--seed 1"
run "restart_chaos" MODE=restart KILLS="${KILLS:-10}" GAP=2 EXAMPLE_ARGS="--seed 1"
echo "cluster_ft: results in $out/runs.jsonl"
