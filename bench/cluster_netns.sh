#!/usr/bin/env bash
# A job on HOSTS "hosts" of NPER ranks each, started as a cluster starts one: every host a
# network namespace on one bridge (scripts/netns_hosts.sh), one launcher agent per host, the
# rendezvous store on host 0 (--rdzv-backend c10d). Each agent's output goes to
# OUT/host<i>.log and its exit status to OUT/status (a line "host <i> <status>"). Removes its
# hosts and every process on them however it ends. Needs root and iproute2: exits 77 without.
#   bench/cluster_netns.sh HOSTS NPER PROGRAM [ARGS...]
# Environment:
#   NNODES       --nnodes (default HOSTS; MIN:MAX for an elastic job)
#   LAUNCHER     dpxrun (default: build/tools/dpxrun/dpxrun) or torchrun (the venv's, --no-python)
#   OUT          where the logs go (default: a new folder under /tmp, printed)
#   KILL_HOST    a host to kill (its agent and ranks, SIGKILL) once KILL_WHEN holds:
#   KILL_WHEN    "file PATH" (once PATH exists) or a number of seconds after the start
#   STAGGER      seconds between two agents' starts (default 0)
#   RDZV_CONF    --rdzv-conf for dpxrun (default: its own)
#   LAUNCH_ARGS  more launcher flags, e.g. "--max-restarts 1"
#   TIMEOUT      seconds before everything is stopped (default 1800)
# Exits 0 when every agent that was not killed exited 0, else 1.
set -uo pipefail
hosts=$1 nper=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "cluster_netns: network namespaces need root and iproute2; skipped" >&2; exit 77
fi
prefix="dpxc$(($$ % 100000))h" subnet="10.215.$(($$ % 250))" port=29400
out=${OUT:-$(mktemp -d /tmp/dpx-cluster-XXXXXX)}
mkdir -p "$out"
: > "$out/status"
echo "cluster_netns: $hosts hosts x $nper ranks, logs in $out" >&2
cleanup() { bash "$here/scripts/netns_hosts.sh" down "$prefix" "$hosts"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
bash "$here/scripts/netns_hosts.sh" up "$prefix" "$hosts" "$subnet" ||
  { echo "cluster_netns: could not make the namespaces" >&2; exit 77; }

case "${LAUNCHER:-dpxrun}" in
  torchrun) launcher=("$here/.venv/bin/torchrun" --no-python) ;;
  dpxrun) launcher=("$here/build/tools/dpxrun/dpxrun") ;;
  *) launcher=("$LAUNCHER") ;;
esac
extra=()
[ -n "${RDZV_CONF:-}" ] && extra=(--rdzv-conf "$RDZV_CONF")
date +%s.%N > "$out/started_at"
pids=()
for ((i = 0; i < hosts; i++)); do
  conf=("${extra[@]}")
  # torchrun serves the store only where the endpoint is one of the machine's own names, which
  # a namespace's address is not: it is told which agent hosts it.
  # Its workers' MASTER_ADDR is the host's name, the same for all namespaces: the address is
  # given instead (--local-addr).
  [ "${LAUNCHER:-dpxrun}" = torchrun ] &&
    conf=(--rdzv-conf "is_host=$([ $i = 0 ] && echo 1 || echo 0)" --local-addr "$subnet.$((i + 1))")
  ip netns exec "$prefix$i" env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
    timeout -k 10 "${TIMEOUT:-1800}" "${launcher[@]}" --nnodes "${NNODES:-$hosts}" \
    --nproc-per-node "$nper" --rdzv-backend c10d --rdzv-endpoint "$subnet.1:$port" \
    --rdzv-id "cluster$$" "${conf[@]}" ${LAUNCH_ARGS:-} "$@" > "$out/host$i.log" 2>&1 &
  pids+=($!)
  sleep "${STAGGER:-0}"
done

killed=-1
if [ -n "${KILL_HOST:-}" ]; then
  case "${KILL_WHEN:-}" in
    file\ *) while [ ! -e "${KILL_WHEN#file }" ] && kill -0 "${pids[0]}" 2>/dev/null; do sleep 0.2; done ;;
    *) sleep "${KILL_WHEN:-10}" ;;
  esac
  date +%s.%N > "$out/killed_at"
  ip netns pids "$prefix$KILL_HOST" | xargs -r kill -9
  killed=$KILL_HOST
  echo "cluster_netns: killed host $KILL_HOST" >&2
fi

failed=0
for ((i = 0; i < hosts; i++)); do
  wait "${pids[$i]}"
  s=$?
  echo "host $i $s" >> "$out/status"
  [ "$i" != "$killed" ] && [ "$s" != 0 ] && failed=1
done
date +%s.%N > "$out/ended_at"
exit $failed
