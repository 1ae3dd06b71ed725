#!/usr/bin/env bash
# examples/fashion_mnist over shm, gloo and mpi (issue #43), alternated in one run: ROUNDS rounds,
# each backend in turn (the order rotated each round), WORLD ranks of 1 thread each, EPOCHS
# epochs on TRAIN_LIMIT images. shm and gloo start under dpxrun, mpi under OpenMPI's mpirun
# (the example's --backend mpi, rank and size from MPI_COMM_WORLD). Per run: the training
# throughput the example reports at the end of its last epoch, its test accuracy, and DDP's
# exposed and total communication per step (its last "ddp" metrics record: PyTorch's DDP
# logging fields, averaged over its sampled steps, in ns).
#   bench/example_backends.sh [BUILD_DIR]
#   env: ROUNDS=3 WORLD=2 EPOCHS=1 TRAIN_LIMIT=60000 DATA_DIR=/usr/share/datasets/fashion-mnist
# Prints a line per run, then per backend the medians and the ratios to shm.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-${BUILD_DIR:-build}}
rounds=${ROUNDS:-3}
world=${WORLD:-2}
epochs=${EPOCHS:-1}
limit=${TRAIN_LIMIT:-60000}
data=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
out=$(mktemp -d /tmp/dpx-example-backends-XXXXXX)
export OMP_NUM_THREADS=1
common=(--epochs "$epochs" --train-limit "$limit" --data-dir "$data" --report-every 25
        --checkpoint-every 1000000)
echo "# fashion_mnist, $world ranks x 1 thread, $epochs epoch(s) on $limit images, $rounds rounds; logs in $out"
backends=(shm gloo mpi)
for round in $(seq 0 $((rounds - 1))); do
  for i in 0 1 2; do
    b=${backends[$(( (i + round) % 3 ))]}
    run=$out/$b-$round
    mkdir -p "$run"
    if [ "$b" = mpi ]; then
      launcher=(mpirun.openmpi --allow-run-as-root --oversubscribe -np "$world" -x OMP_NUM_THREADS)
    else
      launcher=("$build/tools/dpxrun/dpxrun" --standalone --nproc-per-node "$world")
    fi
    "${launcher[@]}" "$build/examples/fashion_mnist/fashion_mnist" --backend "$b" "${common[@]}" \
      --checkpoint-dir "$run/ckpt" --metrics-file "$run/metrics.jsonl" > "$run/log" 2>&1 ||
      { echo "$b round $round failed: $(tail -n 3 "$run/log")" >&2; exit 1; }
    python3 - "$run/metrics.jsonl" "$b" "$round" >> "$out/runs.txt" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in recs if r["type"] == "train"][-1]
acc = [r for r in recs if r["type"] == "eval"][-1]["test_accuracy"]
ddp = [r for r in recs if r["type"] == "ddp"][-1]["stats"]
print(sys.argv[2], sys.argv[3], round(train["samples_per_s"], 1), acc,
      round(ddp["avg_exposed_comm_time"] / 1e6, 3), round(ddp["avg_backward_comm_time"] / 1e6, 3),
      ddp["backend_name"])
PY
    tail -n 1 "$out/runs.txt" | awk '{printf "round %s %-5s %8s samples/s  accuracy %s  exposed %s of %s ms/step (%s)\n", $2, $1, $3, $4, $5, $6, $7}'
  done
done
python3 - "$out/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {}
print("\n| backend | samples/s | test accuracy | exposed ms/step | communication ms/step | samples/s vs shm |")
print("|---|---:|---:|---:|---:|---:|")
for b in ("shm", "gloo", "mpi"):
    mine = [r for r in rows if r[0] == b]
    med[b] = [statistics.median(float(r[k]) for r in mine) for k in (2, 3, 4, 5)]
for b in ("shm", "gloo", "mpi"):
    sps, acc, exp, comm = med[b]
    print(f"| {b} | {sps:.1f} | {100 * acc:.2f}% | {exp:.3f} | {comm:.3f} | {sps / med['shm'][0]:.3f} |")
PY
