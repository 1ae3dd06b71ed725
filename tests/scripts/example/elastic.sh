#!/usr/bin/env bash
# Elastic: under dpxrun --max-restarts 1 a worker SIGKILLed mid-epoch is restarted with the rest of
# the group, resumes from the last checkpoint (not from scratch), and ends with the accuracy of a
# run without the fault: the same weights to the bit.
#   elastic.sh <dpxrun> <fashion_mnist> <scratch dir>
set -euo pipefail
dpxrun="$1" bin="$2" work="$3"
source "$(dirname "$0")/dataset.sh" "$work"
fail() { echo "FAILED: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
# 2 epochs of 64 steps per rank; a checkpoint every 16 steps.
args=(--epochs 2 --batch-size 32 --train-limit 4096 --checkpoint-every 16)
accuracy() { grep '"type":"eval"' "$1" | tail -1 | sed 's/.*"test_accuracy":\([0-9.e-]*\).*/\1/'; }

"$dpxrun" --standalone --nproc-per-node 2 "$bin" "${args[@]}" --checkpoint-dir "$work/ref/ckpt" \
  --metrics-file "$work/ref.jsonl" >"$work/ref.log" 2>&1 || fail "the run without a fault failed"

"$dpxrun" --standalone --nproc-per-node 2 --max-restarts 1 "$bin" "${args[@]}" \
  --checkpoint-dir "$work/fault/ckpt" --metrics-file "$work/fault.jsonl" >"$work/fault.log" 2>&1 &
launcher=$!
trap 'kill -9 $launcher 2>/dev/null || true' EXIT
for _ in $(seq 1200); do
  [ -f "$work/fault/ckpt/checkpoint-000000000032.dpx" ] && break
  sleep 0.1
done
[ -f "$work/fault/ckpt/checkpoint-000000000032.dpx" ] || fail "no checkpoint at step 32 within 120 s"
victim="$(pgrep -P "$launcher" | tail -1)"
[ -n "$victim" ] || fail "no worker process found under dpxrun ($launcher)"
kill -9 "$victim"
echo "killed worker $victim in the middle of epoch 1"
wait "$launcher" || fail "the run did not finish after the restart"
trap - EXIT

resumed="$(grep -o 'resumed from checkpoint at epoch [0-9]* step [0-9]*' "$work/fault.log" | tail -1)"
[ -n "$resumed" ] || fail "the restarted workers did not resume from a checkpoint"
step="${resumed##* }"
[ "$step" -ge 32 ] || fail "resumed at step $step, before the checkpoint at step 32"
a_ref="$(accuracy "$work/ref.jsonl")" a_fault="$(accuracy "$work/fault.jsonl")"
echo "$resumed; test accuracy $a_fault with the fault, $a_ref without"
awk -v a="$a_ref" -v b="$a_fault" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.03) }' ||
  fail "accuracy $a_fault after the fault is not within 0.03 of $a_ref"
# More than close: the checkpoint holds the weights, Adam's state, the random state and the
# sampler's place, so the resumed run ends with the very weights of the run without the fault,
# identical on both ranks (the example checks that and writes their digest).
digest() { grep '"type":"replicas"' "$1" | tail -1 | sed 's/.*"digest":"\(0x[0-9a-f]*\)".*/\1/'; }
d_ref="$(digest "$work/ref.jsonl")" d_fault="$(digest "$work/fault.jsonl")"
[ -n "$d_ref" ] && [ "$d_ref" = "$d_fault" ] ||
  fail "the weights after the fault ($d_fault) are not those of the run without it ($d_ref)"
echo "weights digest $d_fault in both runs"
echo "elastic run passed"
