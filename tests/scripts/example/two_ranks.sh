# Sourced by the example scripts that train 2 ranks under dpxrun and compare runs
# (`source "$(dirname "$0")/two_ranks.sh"` after dataset.sh, with $dpxrun, $bin and $work set):
# fail MESSAGE prints every run's log and exits 1; run NAME ARGS... trains 1 epoch of 32 steps
# per rank with a checkpoint every 10 steps, checkpoints in $work/NAME, metrics in
# $work/NAME.jsonl; accuracy METRICS prints the last test accuracy.
fail() { echo "FAILED: $*"; for f in "$work"/*.log; do echo "--- $f"; tail -20 "$f"; done; exit 1; }
args=(--epochs 1 --batch-size 32 --train-limit 2048 --checkpoint-every 10)
run() {
  local name=$1; shift
  "$dpxrun" --standalone --nproc-per-node 2 "$bin" "${args[@]}" --checkpoint-dir "$work/$name" \
    --metrics-file "$work/$name.jsonl" "$@" >>"$work/$name.log" 2>&1
}
accuracy() { grep '"type":"eval"' "$1" | tail -1 | sed 's/.*"test_accuracy":\([0-9.e-]*\).*/\1/'; }
