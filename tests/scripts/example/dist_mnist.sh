#!/usr/bin/env bash
# examples/dist_mnist on 2 ranks, 300 steps of one epoch: under mpirun (as pytorch/examples runs
# the original) and under dpxrun. Each run must have trained (rank 0's test loss below chance's
# ln 10 = 2.30 and its accuracy above a floor; chance is 10%), its ranks must end with the same weights, and the two launchers must
# train alike (same seed, sampler and reduction: the same weights and test result).
#   dist_mnist.sh <dpxrun> <dist_mnist binary> <scratch dir>
set -euo pipefail
dpxrun="$1" bin="$2" work="$3"
source "$(dirname "$0")/dataset.sh" "$work"
fail() { echo "FAILED: $*"; exit 1; }
# Nothing of a surrounding launcher's contract leaks in.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK MASTER_ADDR MASTER_PORT
args=(--epochs 1 --max-steps 300)
floor=40      # percent; 300 steps reach 61.6 (docs/migrating.md)
loss_ceiling=2.0  # 300 steps reach 1.48

# A free port for the mpirun job's store (its default, 20000 + the job id, may be taken).
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')

check() {  # <log>: both ranks trained, agree, and rank 0 tested above the floor
  for r in 0 1; do
    grep -q "Accuracy in rank $r in epoch 1 - " "$1" || fail "no accuracy of rank $r in $1"
  done
  local w0 w1 acc loss
  w0="$(sed -n 's/^.*Weights sum in rank 0 - //p' "$1")"
  w1="$(sed -n 's/^.*Weights sum in rank 1 - //p' "$1")"
  [ -n "$w0" ] && [ "$w0" = "$w1" ] || fail "the ranks ended with different weights: '$w0' vs '$w1'"
  acc="$(sed -n 's/^.*Test Accuracy - //p' "$1")"
  [ -n "$acc" ] || fail "no test accuracy in $1"
  awk -v a="$acc" -v f="$floor" 'BEGIN { exit !(a >= f) }' ||
    fail "test accuracy $acc% is below $floor%: the model did not train"
  loss="$(sed -n 's/^.*Test loss - //p' "$1")"
  awk -v l="$loss" -v c="$loss_ceiling" 'BEGIN { exit !(l != "" && l < c) }' ||
    fail "test loss '$loss' is not below $loss_ceiling: the model did not train"
}

command -v mpirun >/dev/null || fail "no mpirun (scripts/setup.sh installs openmpi-bin)"
# CI runs as root, which mpirun refuses unless told; 2 ranks may exceed the slots it counts.
timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=1 \
  -x MASTER_PORT="$port" "$bin" "${args[@]}" >"$work/mpirun.log" 2>&1 ||
  { cat "$work/mpirun.log"; fail "mpirun -np 2 failed"; }
cat "$work/mpirun.log"
check "$work/mpirun.log"

timeout 120 "$dpxrun" --standalone --nproc-per-node 2 "$bin" "${args[@]}" \
  >"$work/dpxrun.log" 2>&1 || { cat "$work/dpxrun.log"; fail "dpxrun failed"; }
cat "$work/dpxrun.log"
check "$work/dpxrun.log"

result() { grep -h -e 'Weights sum in rank 0' -e 'Test Accuracy' "$1" | sed 's/^.*\(Weights\|Test\)/\1/'; }
[ "$(result "$work/mpirun.log")" = "$(result "$work/dpxrun.log")" ] ||
  fail "mpirun and dpxrun trained differently: $(result "$work/mpirun.log") vs $(result "$work/dpxrun.log")"
echo "dist_mnist trained alike under mpirun and dpxrun"
