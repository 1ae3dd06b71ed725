#!/usr/bin/env bash
# Smoke run of examples/fashion_mnist: 6 steps, then a restart that must resume at step 6.
#   run.sh <fashion_mnist binary> <scratch dir>
set -euo pipefail
bin="$1" work="$2"
root="$(cd "$(dirname "$0")/../../.." && pwd)"
source "$(dirname "$0")/dataset.sh" "$work"
run() {
  env MASTER_ADDR=127.0.0.1 MASTER_PORT=0 RANK=0 WORLD_SIZE=1 "$bin" --epochs 2 \
    --batch-size 32 --train-limit 512 --checkpoint-every 3 --checkpoint-dir "$work/ckpt" \
    --metrics-file "$work/metrics.jsonl" "$@" 2>&1 | tee -a "$work/log"
}
fail() { echo "FAILED: $*"; exit 1; }

run --max-steps 6
ls "$work/ckpt"/checkpoint-000000000006.dpx >/dev/null || fail "no checkpoint at step 6"
grep -q '"type":"train"' "$work/metrics.jsonl" || fail "no training metrics"
grep -q '"type":"eval"' "$work/metrics.jsonl" || fail "no evaluation metrics"

run --max-steps 9
grep -q "resumed from checkpoint at epoch 1 step 6" "$work/log" ||
  fail "the second run did not resume from step 6"
ls "$work/ckpt"/checkpoint-000000000009.dpx >/dev/null || fail "no checkpoint at step 9"
# The final model in torch.save form: Python loads it into the same CNN (docs/example.md).
python="${DPX_PYTHON:-}"
if [ -n "$python" ] && "$python" -c "import torch" 2>/dev/null; then
  "$python" - "$work/ckpt/model.pt" <<'PY' || fail "Python could not load model.pt into the CNN"
import sys, torch
from torch import nn
net = nn.Module()
net.conv1, net.conv2 = nn.Conv2d(1, 32, 3, padding=1), nn.Conv2d(32, 64, 3, padding=1)
net.fc1, net.fc2 = nn.Linear(64 * 7 * 7, 128), nn.Linear(128, 10)
net.load_state_dict(torch.load(sys.argv[1], weights_only=True))
PY
fi

if command -v gnuplot >/dev/null; then
  bash "$root/scripts/plot_metrics.sh" "$work/metrics.jsonl" "$work/curves.png"
  [ -s "$work/curves.png" ] || fail "no plot"
fi
echo "example smoke run passed"
