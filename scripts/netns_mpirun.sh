#!/usr/bin/env bash
# OpenMPI's mpirun across two "hosts" (network namespaces joined by a veth pair,
# scripts/netns_pair.sh), started as a cluster starts it: mpirun on the first host and a launch
# agent (what ssh is on a cluster) that enters the second host's namespace to start OpenMPI's
# daemon there. The ranks talk over OpenMPI's TCP transport between the namespaces (shared memory
# cannot cross them). NPER ranks on each host; exits with mpirun's status; removes its
# namespaces however it ends. Needs root and iproute2: exits 77 without them, or when the
# namespaces cannot be made.
#   scripts/netns_mpirun.sh NPER MPIEXEC PROGRAM [ARGS...]     env: DPX_NETNS_TIMEOUT=120
set -uo pipefail
nper=$1 mpiexec=$2
shift 2
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "netns_mpirun: network namespaces need root and iproute2" >&2; exit 77
fi
pair=$(cd "$(dirname "$0")" && pwd)/netns_pair.sh
id=$$
a=dpxmpa$id b=dpxmpb$id
addr_a=10.78.$((id % 250)).1 addr_b=10.78.$((id % 250)).2
dir=$(mktemp -d /tmp/dpx-mpi-hosts-XXXXXX)
cleanup() { bash "$pair" down "$a" "$b"; rm -rf "$dir"; }
trap cleanup EXIT
bash "$pair" up "$a" "$b" "va$id" "vb$id" "$addr_a" "$addr_b" ||
  { echo "netns_mpirun: could not make the namespaces" >&2; exit 77; }
# The launch agent: mpirun calls it as `agent HOST COMMAND...`, as it would call ssh.
cat > "$dir/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  $addr_a) ns=$a ;;
  $addr_b) ns=$b ;;
  *) echo "agent: no host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$dir/agent.sh"
timeout "${DPX_NETNS_TIMEOUT:-120}" ip netns exec "$a" "$mpiexec" --allow-run-as-root \
  --oversubscribe --host "$addr_a:$nper,$addr_b:$nper" -np $((2 * nper)) \
  --mca plm_rsh_agent "$dir/agent.sh" --mca btl tcp,self \
  --mca btl_tcp_if_include "$addr_a/24" --mca oob_tcp_if_include "$addr_a/24" \
  -x OMP_NUM_THREADS=1 "$@"
