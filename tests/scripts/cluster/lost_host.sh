#!/usr/bin/env bash
# A host lost in the middle of training, 3 hosts x 2 ranks (bench/cluster_netns.sh), the example
# on the hierarchical backend, host 2 (or host 0) SIGKILLed with its agent once the checkpoint
# of step 8 exists:
#  1. --nnodes 2:3 --max-restarts 1: the other two hosts restart from the checkpoint, without
#     host 2, and finish with 4 identical replicas;
#  2. --nnodes 3: both end with an error naming the lost host, within 60 s;
#  3. host 0 lost, the one that holds the rendezvous: the others end with an error that says
#     the rendezvous store is gone, within 60 s.
#   lost_host.sh <dpxrun> <fashion_mnist> <scratch dir>
# Environment (bench/cluster_lost_host.sh runs it at 8 x 8): HOSTS (3), NPER (2), VICTIM (the
# host lost in 1 and 2; default the last), BATCH (16 per rank), TRAIN_LIMIT (3072).
set -uo pipefail
dpxrun=$1 bin=$2 work=$3
hosts=${HOSTS:-3} nper=${NPER:-2} victim=${VICTIM:-$((${HOSTS:-3} - 1))}
source "$(dirname "$0")/../example/dataset.sh" "$work"
cluster="$(cd "$(dirname "$0")/../../../bench" && pwd)/cluster_netns.sh"
fail() {
  echo "lost_host: FAILED: $*"
  for f in "$dir"/logs/host*.log; do echo "--- $f"; grep -v "epoch 1/1" "$f" | tail -n 12; done
  exit 1
}
# run NAME HOST_TO_KILL [env...]: one job; its status in $dir/logs/status.
run() {
  dir="$work/$1"
  mkdir -p "$dir" && cd "$dir" || exit 1
  env LAUNCHER="$dpxrun" OUT="$dir/logs" TIMEOUT=150 KILL_HOST="$2" \
    KILL_WHEN="file $dir/ckpt/checkpoint-000000000008.dpx" "${@:3}" \
    bash "$cluster" "$hosts" "$nper" "$bin" --backend hierarchical --epochs 1 \
    --train-limit "${TRAIN_LIMIT:-3072}" --batch-size "${BATCH:-16}" --checkpoint-every 8 \
    --checkpoint-dir "$dir/ckpt" > "$dir/cluster.out" 2>&1
  local s=$?
  [ $s = 77 ] && { echo "lost_host: SKIPPED (network namespaces cannot be made here)"; exit 0; }
  return $s
}
status_of() { awk -v h="$1" '$2 == h { print $3 }' "$dir/logs/status"; }
seconds_after_kill() {
  python3 -c "import sys; print('%.1f' % (float(open(sys.argv[2]).read()) - float(open(sys.argv[1]).read())))" \
    "$dir/logs/killed_at" "$1"
}

# 1. Elastic: the survivors go on from the checkpoint.
survivors=$(((hosts - 1) * nper))
run elastic "$victim" NNODES=$((hosts - 1)):$hosts LAUNCH_ARGS="--max-restarts 1" \
  RDZV_CONF=last_call_timeout=2 ||
  fail "the hosts left did not finish (statuses: $(tr '\n' ' ' < "$dir/logs/status"))"
grep -q "resumed from checkpoint at epoch 1 step" "$dir"/logs/host*.log ||
  fail "the survivors did not resume from the checkpoint"
grep -q "\"type\":\"replicas\",\"ranks\":$survivors,\"identical\":true" fashion_mnist_metrics.jsonl ||
  fail "no record of $survivors identical replicas after the restart"
back=$(python3 - "$dir" <<'PY'
import json, sys
d = sys.argv[1]
setups = [json.loads(l) for l in open(d + "/fashion_mnist_metrics.jsonl") if '"setup"' in l]
print("%.1f" % (setups[-1]["last_first_collective"] - float(open(d + "/logs/killed_at").read())))
PY
)
echo "lost_host: elastic: training again ${back} s after the kill, on $survivors ranks"

# 2. A fixed size: the job ends, naming the lost host (host i is SUBNET.<i+1>).
run fixed "$victim" NNODES=$hosts && fail "the job went on without host $victim though --nnodes $hosts"
for ((h = 0; h < hosts; h++)); do
  [ $h = "$victim" ] || [ "$(status_of $h)" = 1 ] || fail "host $h did not fail"
done
took=$(seconds_after_kill "$dir/logs/ended_at")
awk -v t="$took" 'BEGIN { exit !(t < 60) }' || fail "the job took $took s to end"
for ((h = 0; h < hosts; h++)); do
  [ $h = "$victim" ] && continue
  grep -Eq "dpxrun: lost node [0-9]+ at [0-9.]+\.$((victim + 1)) \(ranks? [0-9-]+\)" "$dir/logs/host$h.log" ||
    fail "host $h's agent did not name the lost host"
done
echo "lost_host: fixed: ended ${took} s after the kill; $(grep -ho 'lost node [^:]*' "$dir/logs/host0.log")"

# 3. The rendezvous's host lost: the others end, saying so.
run rendezvous 0 NNODES=$((hosts - 1)):$hosts LAUNCH_ARGS="--max-restarts 1" &&
  fail "the job survived its store"
took=$(seconds_after_kill "$dir/logs/ended_at")
awk -v t="$took" 'BEGIN { exit !(t < 60) }' || fail "the job took $took s to end"
for ((h = 1; h < hosts; h++)); do
  [ "$(status_of $h)" = 1 ] || fail "host $h did not fail"
  grep -q "lost contact with the rendezvous store" "$dir/logs/host$h.log" ||
    fail "host $h's agent did not say the rendezvous store is gone"
done
echo "lost_host: rendezvous host: ended ${took} s after the kill"
echo "lost_host: PASS"
