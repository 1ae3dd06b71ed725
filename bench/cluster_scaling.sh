#!/usr/bin/env bash
# The example on HOSTS namespace hosts (bench/cluster_netns.sh) at several ranks per host, under
# dpxrun and under PyTorch's torchrun (--no-python, the same program), alternated in one run:
# the set-up's parts (from the example's "setup" record), and, while it trains, the memory of all
# ranks (bench/pss.sh; the baseline, LibTorch alone, measured in the same run), sockets and
# threads per rank. One JSON line per job in OUT/results.jsonl, and a table at the end.
#   bench/cluster_scaling.sh [BUILD]        BUILD: the build folder (default build)
# Environment: HOSTS (8), NPERS ("1 2 4 8"), LAUNCHERS ("dpxrun torchrun"), ROUNDS (1),
#   BACKEND (hierarchical), GLOBAL_BATCH (128: the per-rank batch is GLOBAL_BATCH / ranks),
#   TRAIN_LIMIT (6000), EPOCHS (1), OUT (a new folder under /tmp).
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$here/build}" && pwd)
hosts=${HOSTS:-8}
out=${OUT:-$(mktemp -d /tmp/dpx-scaling-XXXXXX)}
mkdir -p "$out"
example="$build/examples/fashion_mnist/fashion_mnist"
alone=$("$build/bench/dpx-bench-libtorch-alone")
echo "{\"baseline\": $alone}" > "$out/baseline.json"
: > "$out/results.jsonl"

# While a job trains: every rank's memory, sockets and threads, once its set-up is over.
sample() {  # METRICS_FILE RESULT_FILE
  while ! grep -q '"type":"setup"' "$1" 2>/dev/null; do
    pgrep -x fashion_mnist >/dev/null || [ -e "$1" ] || { sleep 0.5; continue; }
    sleep 0.5
  done
  sleep 0.5
  local pss sockets threads
  pss=$(bash "$here/bench/pss.sh" fashion_mnist)
  sockets=() threads=()
  for p in $(pgrep -x fashion_mnist); do
    sockets+=("$(find /proc/$p/fd -lname 'socket:*' 2>/dev/null | wc -l)")
    threads+=("$(ls /proc/$p/task 2>/dev/null | wc -l)")
  done
  printf '{"memory": %s, "sockets": [%s], "threads": [%s]}\n' "$pss" \
    "$(IFS=,; echo "${sockets[*]}")" "$(IFS=,; echo "${threads[*]}")" > "$2"
}

for ((round = 0; round < ${ROUNDS:-1}; round++)); do
  for nper in ${NPERS:-1 2 4 8}; do
    for launcher in ${LAUNCHERS:-dpxrun torchrun}; do
      ranks=$((hosts * nper))
      job="$out/r$round-$launcher-$ranks"
      mkdir -p "$job" && cd "$job" || exit 1
      sample "$job/fashion_mnist_metrics.jsonl" "$job/sample.json" &
      sampler=$!
      LAUNCHER=$launcher OUT="$job/logs" bash "$here/bench/cluster_netns.sh" "$hosts" "$nper" \
        "$example" --backend "${BACKEND:-hierarchical}" --epochs "${EPOCHS:-1}" \
        --train-limit "${TRAIN_LIMIT:-6000}" --batch-size $((${GLOBAL_BATCH:-128} / ranks)) \
        --checkpoint-every 1000000 2> "$job/cluster.err"
      status=$?
      kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
      python3 - "$job" "$launcher" "$ranks" "$status" >> "$out/results.jsonl" <<'PY'
import json, os, sys
job, launcher, ranks, status = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
records = [json.loads(l) for l in open(os.path.join(job, "fashion_mnist_metrics.jsonl"))] \
    if os.path.exists(os.path.join(job, "fashion_mnist_metrics.jsonl")) else []
setup = next((r for r in records if r["type"] == "setup"), None)
evals = [r for r in records if r["type"] == "eval"]
started = float(open(os.path.join(job, "logs", "started_at")).read())
ended = float(open(os.path.join(job, "logs", "ended_at")).read())
result = {"launcher": launcher, "ranks": ranks, "status": status, "total_s": ended - started}
if setup:
    # The parts, each from the last rank to reach the point before it to the last to reach it.
    points = ["started", "main", "group", "data", "first_collective"]
    at = [started] + [setup["last_" + p] for p in points]
    names = ["launch", "libtorch", "group", "data", "first_collective"]
    result.update({n + "_s": at[i + 1] - at[i] for i, n in enumerate(names)})
    result["control_plane_s"] = result["launch_s"] + result["group_s"] + result["first_collective_s"]
if evals:
    result["test_accuracy"] = evals[-1]["test_accuracy"]
sample = os.path.join(job, "sample.json")
if os.path.exists(sample):
    result.update(json.load(open(sample)))
print(json.dumps(result))
PY
      tail -1 "$out/results.jsonl" | cut -c1-300
    done
  done
done
echo "results: $out/results.jsonl"
