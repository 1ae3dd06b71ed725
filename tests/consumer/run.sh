#!/usr/bin/env bash
# Installs dpx from BUILD_DIR into a temporary prefix, builds the consumer project against it,
# then runs two ranks of it by hand (env://) and checks both succeed.
set -euo pipefail
build_dir=$1
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/dpx-consumer-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

cmake --install "$build_dir" --prefix "$work/prefix" >/dev/null
cmake -S "$here" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" | tail -n 20

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for rank in 0 1; do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$rank WORLD_SIZE=2 \
    timeout 60 "$work/build/consumer" >"$work/rank$rank.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
cat "$work"/rank*.log
grep -q "rank 0 sum 3" "$work/rank0.log" && grep -q "rank 1 sum 3" "$work/rank1.log" || status=1
exit $status
