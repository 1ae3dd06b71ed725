#!/usr/bin/env bash
# DCP checkpoints, dpx against PyTorch (issue #48): ROUNDS rounds, each `dpx-bench dcp` under
# bench/run_local.sh, then bench/python/dcp_baseline.py (FSDP2, gloo), the same model (UNITS
# Linear(WIDTH, WIDTH), fp32) sharded over WORLD ranks of one thread, a fresh folder under DIR
# per save. Each run prints its medians over its own REPS saves and loads; this script prints
# every run's line and the median over rounds of python seconds / dpx seconds (dpx's speed-up)
# for save and for load.
#   bench/dcp_vs_python.sh [BUILD_DIR]   env: ROUNDS=3 REPS=3 WORLD=2 WIDTH=2048 UNITS=8
#                                        PYTHON=.venv/bin/python DIR=$(mktemp -d)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${BUILD_DIR:-build}}
rounds=${ROUNDS:-3}
reps=${REPS:-3}
world=${WORLD:-2}
width=${WIDTH:-2048}
units=${UNITS:-8}
python=${PYTHON:-.venv/bin/python}
dir=${DIR:-$(mktemp -d /tmp/dpx-dcp-bench-XXXXXX)}
trap 'rm -rf "$dir"/dpx-* "$dir"/python-*' EXIT
export OMP_NUM_THREADS=1
echo "# DCP save/load: $units x Linear($width, $width) fp32, $world ranks x 1 thread, $rounds" \
  "rounds of $reps; $("$python" -c 'import torch; print("Python torch", torch.__version__)');" \
  "folder $dir"
# "save S load L" seconds from a run's last line.
seconds() { sed -n 's/.*save \([0-9.]*\) s .*load \([0-9.]*\) s .*/\1 \2/p' | tail -n 1; }
save_ratios=()
load_ratios=()
for r in $(seq "$rounds"); do
  dpx_line=$(bench/run_local.sh "$world" "$build/bench/dpx-bench" dcp --rounds "$reps" \
    --width "$width" --units "$units" --dir "$dir" | tail -n 1)
  py_line=$("$python" bench/python/dcp_baseline.py --world "$world" --width "$width" \
    --units "$units" --rounds "$reps" --dir "$dir" 2>/dev/null | tail -n 1)
  echo "round $r: $dpx_line"
  echo "round $r: $py_line"
  read -r ds dl <<< "$(echo "$dpx_line" | seconds)"
  read -r ps pl <<< "$(echo "$py_line" | seconds)"
  save_ratios+=("$(awk -v p="$ps" -v d="$ds" 'BEGIN { printf "%.3f", p / d }')")
  load_ratios+=("$(awk -v p="$pl" -v d="$dl" 'BEGIN { printf "%.3f", p / d }')")
done
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "save: python s / dpx s per round: ${save_ratios[*]}; median $(med "${save_ratios[@]}")"
echo "load: python s / dpx s per round: ${load_ratios[*]}; median $(med "${load_ratios[@]}")"
