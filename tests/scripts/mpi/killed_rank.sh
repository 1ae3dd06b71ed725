#!/usr/bin/env bash
# A rank SIGKILLed during an all-reduce: the MPI's launcher ends the whole job at once (the
# survivors see no PeerLostError: they are killed), says that a rank died of SIGKILL, and exits
# non-zero well before the group's 10 s timeout. What each launcher says and returns:
#   OpenMPI's mpirun   "... rank 2 ... exited on signal 9", status 137 (128 + SIGKILL)
#   MPICH's Hydra      "BAD TERMINATION ... EXIT CODE: 9 ... Killed (signal 9)", status 9
#   killed_rank.sh openmpi|mpich MPIEXEC "FLAGS;..." dpx_mpi_tests
set -uo pipefail
vendor=$1
mpiexec=$2
IFS=';' read -r -a flags <<< "$3"
tests=$4
case $vendor in
  openmpi) want_rc=137 want_text='rank 2 .* exited on signal 9' ;;
  mpich) want_rc=9 want_text='Killed \(signal 9\)' ;;
  *) echo "FAIL: unknown MPI '$vendor'"; exit 1 ;;
esac
start=$(date +%s%N)
out=$("$mpiexec" "${flags[@]}" -np 3 "$tests" --gtest_also_run_disabled_tests \
  --gtest_filter='MpiKilled.*' 2>&1)
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out" | tail -n 8
echo "exit status $rc after $ms ms"
[ "$rc" = "$want_rc" ] || { echo "FAIL: expected $vendor's exit status $want_rc"; exit 1; }
grep -Eq "$want_text" <<< "$out" || { echo "FAIL: the launcher did not say a rank was killed"; exit 1; }
[ "$ms" -lt 8000 ] || { echo "FAIL: the job took $ms ms to end"; exit 1; }
echo PASS
