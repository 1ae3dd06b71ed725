#!/usr/bin/env bash
# Two "hosts" for the benchmarks that cross a network: two network namespaces joined by a veth
# pair (SUBNET.1 and SUBNET.2), NPER ranks in each, every rank running COMMAND with torchrun's
# variables, the master on the first host. Cleans up its namespaces and ranks however it ends.
# Needs root and iproute2; exits 77 (skipped) without them.
#   bench/netns_ranks.sh NPER SUBNET PORT COMMAND [ARGS...]     e.g. 2 10.213.2 29621 dpx-bench ...
set -euo pipefail
nper="$1" subnet="$2" port="$3"
shift 3
if [ "$(id -u)" != 0 ] || ! ip -V >/dev/null 2>&1; then
  echo "netns_ranks: needs root and iproute2 (network namespaces); skipped" >&2
  exit 77
fi
a="dpxna$$" b="dpxnb$$" ia="dpxnva$$" ib="dpxnvb$$"
pair="$(dirname "$0")/../scripts/netns_pair.sh"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  bash "$pair" down "$a" "$b"
}
trap cleanup EXIT
bash "$pair" up "$a" "$b" "$ia" "$ib" "$subnet.1" "$subnet.2"
world=$((2 * nper))
for host in 0 1; do
  ns=$a ifname=$ia
  [ "$host" = 1 ] && ns=$b ifname=$ib
  for ((l = 0; l < nper; l++)); do
    # The stall inspector's store traffic would count as cross-host bytes: off.
    ip netns exec "$ns" env RANK=$((host * nper + l)) WORLD_SIZE=$world LOCAL_RANK=$l \
      LOCAL_WORLD_SIZE=$nper MASTER_ADDR="$subnet.1" MASTER_PORT="$port" \
      GLOO_SOCKET_IFNAME=$ifname OMP_NUM_THREADS=1 DPX_STALL_CHECK_SECONDS=0 \
      timeout -k 5 "${DPX_BENCH_TIMEOUT:-600}" "$@" &
    pids+=($!)
  done
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
