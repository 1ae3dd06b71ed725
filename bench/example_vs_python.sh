#!/usr/bin/env bash
# examples/fashion_mnist end to end against its Python DDP twin (bench/python/fashion_mnist_ddp.py,
# gloo), issue #32: ROUNDS rounds, each the example under dpxrun, then the twin under torchrun,
# 2 ranks of 1 thread each, MAX_STEPS steps; the wall time of each whole command (start-up, data
# loading, training, evaluation, checkpoints and model.pt). Both keep freed memory: dpx by its
# default (DPX_MALLOC=retain), Python by the glibc tunables of `dpx-bench ddp`'s python-retain.
# Both checkpoint every 200 steps (the example's default) into a fresh directory per run.
#   bench/example_vs_python.sh [BUILD_DIR]    env: ROUNDS=3 MAX_STEPS=300 PYTHON=.venv/bin/python
#                                             DATA_DIR=/usr/share/datasets/fashion-mnist
# Prints a line per round and the median of python time / dpx time (the speed-up of dpx).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${BUILD_DIR:-build}}
rounds=${ROUNDS:-3}
steps=${MAX_STEPS:-300}
python=${PYTHON:-.venv/bin/python}
data=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
out=$(mktemp -d /tmp/dpx-example-vs-python-XXXXXX)
retain="glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647"
export OMP_NUM_THREADS=1
common=(--max-steps "$steps" --data-dir "$data")
echo "# fashion_mnist, 2 ranks x 1 thread, $steps steps, $rounds rounds;" \
  "$("$python" -c 'import torch; print("Python torch", torch.__version__)'); logs in $out"

# Runs "$@" with its output in $out/$name.log; prints its wall seconds.
timed() {
  local name=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$@" > "$out/$name.log" 2>&1; then
    echo "$name failed:" >&2; tail -n 20 "$out/$name.log" >&2; exit 1
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }'
}
# The last progress line's samples/s and loss, and the test accuracy, from a run's log.
summary() {
  local log=$out/$1.log
  local rate loss acc
  rate=$(grep -o '[0-9.]* samples/s' "$log" | tail -n 1 | cut -d' ' -f1)
  loss=$(grep -o 'loss [0-9.]*$' "$log" | tail -n 1 | cut -d' ' -f2)
  acc=$(grep -o 'test accuracy [0-9.]*%' "$log" | tail -n 1 | cut -d' ' -f3)
  echo "loop ${rate:-?} samples/s, train loss ${loss:-?}, test accuracy ${acc:-?}"
}

# The Python twin's round $1, timed.
python_twin() {
  GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}$retain" timed "python-$1" \
    "$python" -m torch.distributed.run --standalone --nproc_per_node 2 \
    bench/python/fashion_mnist_ddp.py "${common[@]}" \
    --checkpoint-dir "$out/ckpt-python-$1" --metrics-file "$out/metrics-python-$1.jsonl"
}

ratios=()
for r in $(seq "$rounds"); do
  dpx_s=$(DPX_MALLOC=retain timed dpx-$r "$build/tools/dpxrun/dpxrun" --standalone \
    --nproc-per-node 2 "$build/examples/fashion_mnist/fashion_mnist" "${common[@]}" \
    --checkpoint-dir "$out/ckpt-dpx-$r" --metrics-file "$out/metrics-dpx-$r.jsonl")
  # The Python twin gets a second try, from scratch, if it fails: PyTorch's gloo has been seen to
  # abort its own process (SIGABRT) on a loaded machine, as in CI, where this runs beside other
  # tests. dpx gets no second try.
  py_s=$(python_twin "$r") || {
    echo "python-$r failed; running it once more (PyTorch's gloo on a loaded machine)" >&2
    rm -rf "$out/ckpt-python-$r" "$out/metrics-python-$r.jsonl"
    py_s=$(python_twin "$r")
  }
  ratio=$(awk -v p="$py_s" -v d="$dpx_s" 'BEGIN { print p / d }')
  ratios+=("$ratio")
  printf 'round %d/%d: dpx %.2f s (%s); python %.2f s (%s); python/dpx %.3f\n' \
    "$r" "$rounds" "$dpx_s" "$(summary dpx-$r)" "$py_s" "$(summary python-$r)" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 }
  END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "median python/dpx end to end: %.3f (dpx speed-up; issue #32 wants >= 1.4)\n", m }'
