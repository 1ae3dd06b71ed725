#!/usr/bin/env bash
# The scaling check across "hosts" (docs/scaling.md): two network namespaces joined by a veth
# pair, as tests/multiproc/launcher_multinode_test.cpp sets them up, run the gloo all-reduce
# sweep (and its ring fit) with NPER ranks in each. Needs root and iproute2.
#   bench/scaling_netns.sh <dpx-bench> [NPER] [MAX_BYTES]
set -euo pipefail
bench="$1" nper="${2:-1}" max="${3:-67108864}"
a="dpxsa$$" b="dpxsb$$" ia="dpxva$$" ib="dpxvb$$"
cleanup() { ip netns del "$a" 2>/dev/null || true; ip netns del "$b" 2>/dev/null || true; }
trap cleanup EXIT
ip netns add "$a" && ip netns add "$b"
ip link add "$ia" type veth peer name "$ib"
ip link set "$ia" netns "$a" && ip link set "$ib" netns "$b"
ip -n "$a" addr add 10.213.1.1/24 dev "$ia" && ip -n "$b" addr add 10.213.1.2/24 dev "$ib"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$ia" up && ip -n "$b" link set "$ib" up
world=$((2 * nper)) port=29611 pids=()
for host in 0 1; do
  ns=$a ifname=$ia
  [ "$host" = 1 ] && ns=$b ifname=$ib
  for ((l = 0; l < nper; l++)); do
    rank=$((host * nper + l))
    ip netns exec "$ns" env RANK=$rank WORLD_SIZE=$world MASTER_ADDR=10.213.1.1 \
      MASTER_PORT=$port GLOO_SOCKET_IFNAME=$ifname OMP_NUM_THREADS=1 \
      "$bench" allreduce --backend gloo --max-bytes "$max" &
    pids+=($!)
  done
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
