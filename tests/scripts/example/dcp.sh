#!/usr/bin/env bash
# --checkpoint-format dcp: under DDP (--sharding none) and fully_shard (--sharding full, with
# --checkpoint-async: saves written in the background), a run stopped at step 15 resumes from its DCP checkpoint and ends with the test accuracy of a run
# that was never stopped; Python's dcp.load reads the last checkpoint's model, which is the
# model.pt the run gathered at its end.
#   dcp.sh <dpxrun> <fashion_mnist> <scratch dir>
set -euo pipefail
dpxrun="$1" bin="$2" work="$3"
source "$(dirname "$0")/dataset.sh" "$work"
source "$(dirname "$0")/two_ranks.sh"

run straight --sharding none || fail "the run without a stop failed"
want=$(accuracy "$work/straight.jsonl")
for sharding in none full; do
  name="dcp-$sharding"
  format=(--checkpoint-format dcp)
  [ "$sharding" = full ] && format+=(--checkpoint-async)
  run "$name" --sharding "$sharding" "${format[@]}" --max-steps 15 ||
    fail "the stopped --sharding $sharding run failed"
  [ -f "$work/$name/dcp-15/.metadata" ] || fail "no DCP checkpoint of step 15 in $work/$name"
  run "$name" --sharding "$sharding" "${format[@]}" ||
    fail "the resumed --sharding $sharding run failed"
  grep -q "resumed from checkpoint at epoch 1 step 15" "$work/$name.log" ||
    fail "the --sharding $sharding run did not resume from its DCP checkpoint at step 15"
  got=$(accuracy "$work/$name.jsonl")
  echo "test accuracy: never stopped $want, --sharding $sharding stopped and resumed $got"
  [ -n "$want" ] && [ "$want" = "$got" ] || fail "the accuracies differ"
done

python="${DPX_PYTHON:-}"
if [ -n "$python" ] && "$python" -c "import torch.distributed.checkpoint" 2>/dev/null; then
  for sharding in none full; do
    last="$work/dcp-$sharding/$(ls "$work/dcp-$sharding" | grep -E '^dcp-[0-9]+$' | sort -t- -k2 -n |
      tail -1)"
    "$python" - "$last" "$work/dcp-$sharding/model.pt" <<'PY' || fail "dcp.load of $last failed"
import sys, torch
import torch.distributed.checkpoint as dcp
folder, whole = sys.argv[1], torch.load(sys.argv[2], weights_only=True)
state = {"model": {name: torch.zeros_like(t) for name, t in whole.items()}}
dcp.load(state, checkpoint_id=folder, no_dist=True)
for name, t in whole.items():
    assert torch.equal(state["model"][name], t), f"{name} differs from model.pt"
print(f"dcp.load({folder}) is the run's model.pt")
PY
  done
fi
echo "example DCP checkpoint run passed"
