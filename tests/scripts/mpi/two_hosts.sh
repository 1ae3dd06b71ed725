#!/usr/bin/env bash
# The mpi backend across two "hosts" (network namespaces joined by a veth pair,
# scripts/netns_pair.sh), started as a cluster starts it: OpenMPI's mpirun on the first host and
# a launch agent (what ssh is on a cluster) that enters the second host's namespace to start
# OpenMPI's daemon there. The ranks talk over OpenMPI's TCP transport between the namespaces
# (shared memory cannot cross them). dpx_mpi_tests runs with 1 and with 2 ranks per host.
#   two_hosts.sh MPIEXEC dpx_mpi_tests
# Prints SKIPPED (and exits 0) where namespaces cannot be made.
set -uo pipefail
mpiexec=$1
tests=$2
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null; then
  echo "SKIPPED: network namespaces need root and iproute2"; exit 0
fi
here=$(cd "$(dirname "$0")" && pwd)
pair=$here/../../../scripts/netns_pair.sh
id=$$
a=dpxmpa$id b=dpxmpb$id
addr_a=10.78.$((id % 250)).1 addr_b=10.78.$((id % 250)).2
dir=$(mktemp -d /tmp/dpx-mpi-hosts-XXXXXX)
cleanup() { bash "$pair" down "$a" "$b"; rm -rf "$dir"; }
trap cleanup EXIT
bash "$pair" up "$a" "$b" "va$id" "vb$id" "$addr_a" "$addr_b" ||
  { echo "SKIPPED: could not make the namespaces"; exit 0; }
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
status=0
for per_host in 1 2; do
  np=$((2 * per_host))
  out=$(timeout 120 ip netns exec "$a" "$mpiexec" --allow-run-as-root --oversubscribe \
    --host "$addr_a:$per_host,$addr_b:$per_host" -np "$np" \
    --mca plm_rsh_agent "$dir/agent.sh" --mca btl tcp,self \
    --mca btl_tcp_if_include "$addr_a/24" --mca oob_tcp_if_include "$addr_a/24" \
    "$tests" 2>&1)
  rc=$?
  passed=$(grep -c 'PASSED  \]' <<< "$out")
  echo "$per_host rank(s) per host: exit $rc, $passed of $np ranks passed"
  if [ "$rc" != 0 ] || [ "$passed" != "$np" ]; then
    echo "$out" | tail -n 30
    status=1
  fi
done
((status == 0)) && echo "two_hosts: PASS" || echo "two_hosts: FAIL"
exit "$status"
