#!/usr/bin/env bash
# The ring model (docs/scaling.md) checked out of sample on namespace hosts: all-reduce sweeps
# (dpx-bench allreduce --json) with one rank on each of 2, 4 and 8 hosts (gloo: the fit), shm on
# one host at 2, 4 and 8 ranks (the inside of a host), then 8 hosts x 2, 4 and 8 ranks, flat
# gloo and hierarchical (the measurements to predict). tools/scaling/check_model.py fits,
# predicts and prints prediction against measurement. One JSON document per run in OUT/.
#   bench/cluster_model.sh [BUILD]      env: OUT, MIN_BYTES (4096), MAX_BYTES (4194304), SECONDS (0.05)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
out=${OUT:-$(mktemp -d /tmp/dpx-model-XXXXXX)}
mkdir -p "$out"
sweep=("$build/bench/dpx-bench" allreduce --json --min-bytes "${MIN_BYTES:-4096}"
       --max-bytes "${MAX_BYTES:-4194304}" --seconds "${SECONDS_PER_SIZE:-0.05}")
json_of() { sed -n '/^\[default0\]:{/,/^\[default0\]:}/p' "$1" | sed 's/^\[default0\]://'; }
for n in 2 4 8; do
  OMP_NUM_THREADS=1 "$build/tools/dpxrun/dpxrun" --standalone --nproc-per-node "$n" "${sweep[@]}" --backend shm \
    > "$out/shm-1x$n.log" 2>&1
  json_of "$out/shm-1x$n.log" > "$out/shm-1x$n.json"
done
for shape in "2 1" "4 1" "8 1" "8 2" "8 4" "8 8"; do
  set -- $shape
  for backend in gloo hierarchical; do
    [ "$2" = 1 ] && [ "$backend" = hierarchical ] && continue  # one rank a host: gloo alone
    OUT="$out/logs-$backend-$1x$2" bash "$here/bench/cluster_netns.sh" "$1" "$2" "${sweep[@]}" \
      --backend "$backend" > /dev/null 2>&1
    cat "$out/logs-$backend-$1x$2"/host*.log > "$out/$backend-$1x$2.log"
    json_of "$out/$backend-$1x$2.log" > "$out/$backend-$1x$2.json"
    echo "cluster_model: $backend $1 x $2 done" >&2
  done
done
python3 "$here/tools/scaling/check_model.py" "$out"
