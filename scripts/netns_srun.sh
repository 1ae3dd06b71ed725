#!/usr/bin/env bash
# Slurm's srun --mpi=pmix across two "hosts": a private two-node cluster (Debian's slurm-wlm,
# auth/none, no munge) on network namespaces made by netns_hosts.sh, slurmctld and the first
# slurmd on host 0, the second slurmd on host 1, then
#   srun --mpi=pmix --nodes 2 --ntasks-per-node NPER PROGRAM [ARGS...]
# from host 0. Each slurmd also gets its own hostname (dpxn0, dpxn1), /dev/shm and /etc/hosts
# (the node names resolve: a program's Slurm-derived MASTER_ADDR is dpxn0), and each node its own
# PMIx directories (SlurmdSpoolDir and TmpFS by %n), as separate machines have
# (Note [Two Slurm nodes on one machine]). Exits with srun's status; removes the daemons and the
# namespaces however it ends. Exits 77 where it cannot run: not root, no iproute2/util-linux or
# slurm-wlm, no pmix plugin, namespaces not made, or a cluster that does not come up (its logs
# printed).
#   scripts/netns_srun.sh NPER PROGRAM [ARGS...]     env: DPX_NETNS_TIMEOUT=120 (srun's limit)
#
# Note [Two Slurm nodes on one machine]
# slurmd runs under `nsenter --net`, not `ip netns exec`, whose fresh /sys lacks /sys/fs/cgroup
# (slurmd: "Unable to initialize cgroup plugin"). With both nodes' slurmstepd sharing /tmp, the
# second fails the step ("mpi/pmix_v4: pmixp_mkdir: Cannot create directory
# /tmp/spmix_appdir_0_JOB.0: File exists"): TmpFS=DIR/%n separates them. With a shared hostname
# and /dev/shm, OpenMPI's shared-memory segments of the two nodes' ranks collide (named by host,
# job and local rank): a segfault in mca_btl_vader_poll_handle_frag during MPI_Init; either a
# hostname or a /dev/shm of each node's own is enough, each slurmd gets both (its own UTS and
# mount namespace), and an /etc/hosts naming the nodes.
set -uo pipefail
nper=$1
shift
skip() { echo "netns_srun: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "slurmd and network namespaces need root"
for tool in ip nsenter unshare hostname slurmctld slurmd srun sinfo; do
  command -v "$tool" >/dev/null ||
    skip "$tool is missing (scripts/setup.sh installs iproute2, slurm-wlm)"
done
hosts=$(cd "$(dirname "$0")" && pwd)/netns_hosts.sh
id=$$
prefix=dpxsr$id subnet=10.79.$((id % 250))
dir=$(mktemp -d /tmp/dpx-srun-XXXXXX)
cleanup() { bash "$hosts" down "$prefix" 2; rm -rf "$dir"; }
trap cleanup EXIT
trap 'exit 143' TERM INT
bash "$hosts" up "$prefix" 2 "$subnet" || skip "could not make the namespaces"
in_host() { local i=$1; shift; nsenter --net="/var/run/netns/$prefix$i" "$@"; }

# Fresh namespaces: every port is free in them.
mkdir -p "$dir/state" "$dir/spool/dpxn0" "$dir/spool/dpxn1" "$dir/tmp/dpxn0" "$dir/tmp/dpxn1"
printf '127.0.0.1 localhost\n%s.1 dpxn0\n%s.2 dpxn1\n' "$subnet" "$subnet" > "$dir/hosts"
cat > "$dir/slurm.conf" <<CONF
ClusterName=dpxtwo
SlurmctldHost=$(hostname)($subnet.1)
AuthType=auth/none
CredType=cred/none
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/linear
MpiDefault=none
ReturnToService=2
SlurmUser=root
SlurmdUser=root
FirstJobId=$((RANDOM % 9999 + 1))
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
NodeName=dpxn0 NodeAddr=$subnet.1 CPUs=8 State=UNKNOWN
NodeName=dpxn1 NodeAddr=$subnet.2 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=dpxn[0-1] Default=YES MaxTime=60 State=UP
CONF
export SLURM_CONF=$dir/slurm.conf
in_host 0 slurmctld -D -i -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
for i in 0 1; do
  in_host "$i" unshare --uts --mount sh -c "hostname dpxn$i && mount -t tmpfs tmpfs /dev/shm &&
    mount --bind $dir/hosts /etc/hosts && exec slurmd -D -N dpxn$i -f $SLURM_CONF" \
    > "$dir/slurmd$i.out" 2>&1 &
done
state=
for ((try = 0; try < 60; try++)); do
  state=$(in_host 0 sinfo -h -o %t 2>/dev/null)
  [ "$state" = idle ] && break
  sleep 0.5
done
if [ "$state" != idle ]; then
  for f in "$dir"/*.out; do echo "--- $f"; tail -n 20 "$f"; done >&2
  skip "the two-node Slurm cluster did not come up within 30 s (sinfo: '$state')"
fi
in_host 0 srun --mpi=list 2>&1 | grep -q pmix ||
  skip "this Slurm has no pmix plugin (srun --mpi=list)"
# In the background: a signal to this script is handled at once (and cleans up), not once srun
# ends.
in_host 0 timeout -k 10 "${DPX_NETNS_TIMEOUT:-120}" srun --mpi=pmix --nodes 2 \
  --ntasks-per-node "$nper" --time 5 "$@" &
wait $!
rc=$?
echo "netns_srun: steps launched: dpxn0 $(grep -c 'launch task' "$dir/slurmd.dpxn0.log")," \
  "dpxn1 $(grep -c 'launch task' "$dir/slurmd.dpxn1.log")" >&2
exit "$rc"
