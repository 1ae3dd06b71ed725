#!/usr/bin/env bash
# The example under dpxrun --timeline, 2 ranks, a few steps: the merged trace has one row per
# rank with the step's events on one clock, dpxrun prints both ranks' step reports, the metrics
# file holds DDP records, and tools/timeline/timeline_svg.py draws a step.
#   timeline.sh <dpxrun> <fashion_mnist> <scratch dir>
set -euo pipefail
dpxrun="$1" bin="$2" work="$3"
root="$(cd "$(dirname "$0")/../../.." && pwd)"
source "$(dirname "$0")/dataset.sh" "$work"
fail() { echo "FAILED: $*"; exit 1; }
"$dpxrun" --nproc-per-node 2 --timeline "$work/trace.json" "$bin" --epochs 1 --batch-size 32 \
  --train-limit 512 --max-steps 6 --report-every 3 --checkpoint-dir "$work/ckpt" \
  --metrics-file "$work/metrics.jsonl" 2>&1 | tee "$work/log"

grep -q "timeline of 2 rank(s) written to $work/trace.json" "$work/log" || fail "no merge message"
grep -qE '^ +0 +6 ' "$work/log" || fail "no step report line for rank 0 (6 iterations)"
grep -qE '^ +1 +6 ' "$work/log" || fail "no step report line for rank 1 (6 iterations)"
[ "$(grep -c '"type":"ddp"' "$work/metrics.jsonl")" = 2 ] || fail "expected DDP records at steps 3, 6"
grep -q '"avg_backward_compute_comm_overlap_time"' "$work/metrics.jsonl" || fail "no overlap field"

python3 - "$work/trace.json" <<'PY' || fail "the merged trace is wrong"
import collections, json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
n = collections.Counter((e["pid"], e["name"]) for e in events)
for rank in (0, 1):
    for name, want in (("forward", 6), ("backward", 6), ("optimizer.step", 6),
                       ("wait for buckets", 6)):
        assert n[(rank, name)] == want, (rank, name, n[(rank, name)])
    assert n[(rank, "allreduce")] >= 6, n
params = {p for e in events if e["name"] == "allreduce" for p in e["args"]["params"]}
assert params == {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                  "fc1.bias", "fc2.weight", "fc2.bias"}, params
assert min(e["ts"] for e in events if "ts" in e) == 0
# One clock: rank 1's forward of a step starts within 50 ms of rank 0's (the ranks are in step).
f0 = sorted(e["ts"] for e in events if e["pid"] == 0 and e["name"] == "forward")
f1 = sorted(e["ts"] for e in events if e["pid"] == 1 and e["name"] == "forward")
assert all(abs(a - b) < 50e3 for a, b in zip(f0[1:], f1[1:])), (f0, f1)
PY
python3 "$root/tools/timeline/timeline_svg.py" "$work/trace.json" -o "$work/step.svg" --step 3
grep -q "rank 1" "$work/step.svg" || fail "the picture has no row for rank 1"
grep -q "all-reduce" "$work/step.svg" || grep -q "allreduce" "$work/step.svg" || fail "no all-reduce in the picture"
echo "timeline run passed"
