#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces NS_A and NS_B joined by a veth pair (IF_A in
# NS_A, IF_B in NS_B) with ADDR_A/24 and ADDR_B/24, each with its own loopback up. The one place
# the multi-host tests (tests/support/netns_hosts.cpp) and benchmarks (bench/netns_ranks.sh)
# make and remove theirs. Needs root and iproute2.
#   scripts/netns_pair.sh up NS_A NS_B IF_A IF_B ADDR_A ADDR_B
#   scripts/netns_pair.sh down NS_A NS_B       (removing a namespace removes its veth end too)
set -euo pipefail
case "${1:-}" in
  up)
    (($# == 7)) || { echo "usage: $0 up NS_A NS_B IF_A IF_B ADDR_A ADDR_B" >&2; exit 2; }
    a=$2 b=$3 ia=$4 ib=$5 addr_a=$6 addr_b=$7
    ip netns add "$a"
    ip netns add "$b"
    ip link add "$ia" type veth peer name "$ib"
    ip link set "$ia" netns "$a"
    ip link set "$ib" netns "$b"
    ip -n "$a" addr add "$addr_a/24" dev "$ia"
    ip -n "$b" addr add "$addr_b/24" dev "$ib"
    for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
    ip -n "$a" link set "$ia" up
    ip -n "$b" link set "$ib" up
    ;;
  down)
    (($# == 3)) || { echo "usage: $0 down NS_A NS_B" >&2; exit 2; }
    ip netns del "$2" 2>/dev/null || true
    ip netns del "$3" 2>/dev/null || true
    ;;
  *) echo "usage: $0 up NS_A NS_B IF_A IF_B ADDR_A ADDR_B | down NS_A NS_B" >&2; exit 2 ;;
esac
