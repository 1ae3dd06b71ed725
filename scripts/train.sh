#!/usr/bin/env bash
# The main job: installs what dpx needs, builds it, and trains the Fashion-MNIST CNN for 3 epochs
# on 2 worker processes of this machine with DistributedDataParallel over shared memory.
#   scripts/train.sh [extra flags for the example, e.g. --epochs 5 --lr 2e-3]
# Output in runs/fashion_mnist/: checkpoints, metrics.jsonl, curves.png. Each call starts afresh;
# the example itself resumes from its checkpoints when a launcher restarts it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
run="runs/fashion_mnist"
rm -rf "$run" && mkdir -p "$run"
start=$(date +%s)
build/tools/dpxrun/dpxrun --standalone --nproc-per-node 2 --max-restarts 1 \
  build/examples/fashion_mnist/fashion_mnist --backend shm --epochs 3 \
  --checkpoint-dir "$run/checkpoints" --metrics-file "$run/metrics.jsonl" "$@"
echo "train: finished in $(( $(date +%s) - start )) s; curves:"
bash scripts/plot_metrics.sh "$run/metrics.jsonl" "$run/curves.png"
