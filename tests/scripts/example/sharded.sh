#!/usr/bin/env bash
# --sharding full: the example trained with fully_shard on 2 ranks ends with the model and the
# test accuracy of the same run under DDP (the gradients are the same averages), also when it is
# stopped and resumed from its sharded checkpoint; Python loads the gathered model.pt.
#   sharded.sh <dpxrun> <fashion_mnist> <scratch dir>
set -euo pipefail
dpxrun="$1" bin="$2" work="$3"
source "$(dirname "$0")/dataset.sh" "$work"
source "$(dirname "$0")/two_ranks.sh"

run ddp --sharding none || fail "the DDP run failed"
run full --sharding full || fail "the fully_shard run failed"
ls -d "$work/full"/sharded-* >/dev/null 2>&1 || fail "no sharded checkpoint was written"
run resumed --sharding full --max-steps 15 || fail "the stopped fully_shard run failed"
run resumed --sharding full || fail "the resumed fully_shard run failed"
grep -q "resumed from checkpoint at epoch 1 step 15" "$work/resumed.log" ||
  fail "the second fully_shard run did not resume from its checkpoint at step 15"

ddp=$(accuracy "$work/ddp.jsonl") full=$(accuracy "$work/full.jsonl")
resumed=$(accuracy "$work/resumed.jsonl")
echo "test accuracy: DDP $ddp, fully_shard $full, fully_shard stopped and resumed $resumed"
[ -n "$ddp" ] && [ "$ddp" = "$full" ] && [ "$full" = "$resumed" ] ||
  fail "the accuracies differ"

python="${DPX_PYTHON:-}"
if [ -n "$python" ] && "$python" -c "import torch" 2>/dev/null; then
  "$python" - "$work"/{ddp,full,resumed}/model.pt <<'PY' || fail "the gathered models differ"
import sys, torch
ddp, *sharded = [torch.load(path, weights_only=True) for path in sys.argv[1:]]
for model in sharded:
    assert list(model) == list(ddp), (list(model), list(ddp))
    for name, tensor in model.items():
        err = (tensor - ddp[name]).abs().max().item()
        assert err <= 1e-5, f"{name} differs from DDP's by {err}"
print("model.pt of fully_shard (whole run and resumed) equals DDP's")
PY
fi
echo "example sharded run passed"
