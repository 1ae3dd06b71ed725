#!/usr/bin/env bash
# N "hosts" on one machine, as a rack's nodes on one switch: network namespaces PREFIX0 ...
# PREFIX<N-1>, each with its own loopback and an interface eth0 at SUBNET.<i+1>/24, joined by a
# bridge in a namespace of its own (PREFIXsw), so they reach one another and nothing else, and
# removing the namespaces removes every link. Needs root and iproute2.
#   scripts/netns_hosts.sh up PREFIX N SUBNET       e.g. up dpxc 8 10.214.3
#   scripts/netns_hosts.sh down PREFIX N           (kills what runs in them, then removes them)
set -euo pipefail
usage() { echo "usage: $0 up PREFIX N SUBNET | down PREFIX N" >&2; exit 2; }
[ $# -ge 3 ] || usage
prefix=$2 n=$3
case "$1" in
  up)
    [ $# = 4 ] || usage
    subnet=$4
    ip netns add "${prefix}sw"
    ip -n "${prefix}sw" link add br0 type bridge
    ip -n "${prefix}sw" link set br0 up
    for ((i = 0; i < n; i++)); do
      ns="$prefix$i"
      ip netns add "$ns"
      # Made in the switch's namespace (names there are its own), one end moved to the host.
      ip -n "${prefix}sw" link add "p$i" type veth peer name "h$i"
      ip -n "${prefix}sw" link set "h$i" netns "$ns"
      ip -n "${prefix}sw" link set "p$i" master br0 up
      ip -n "$ns" link set "h$i" name eth0
      ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
      ip -n "$ns" link set lo up
      ip -n "$ns" link set eth0 up
    done
    ;;
  down)
    # Every process in them first, until none is left: an agent may fork a worker meanwhile.
    for ((try = 0; try < 20; try++)); do
      left=0
      for ((i = 0; i < n; i++)); do
        pids=$(ip netns pids "$prefix$i" 2>/dev/null || true)
        [ -n "$pids" ] && left=1 && { echo "$pids" | xargs -r kill -9 2>/dev/null || true; }
      done
      [ $left = 0 ] && break
      sleep 0.1
    done
    for ((i = 0; i < n; i++)); do ip netns del "$prefix$i" 2>/dev/null || true; done
    ip netns del "${prefix}sw" 2>/dev/null || true
    ;;
  *) usage ;;
esac
