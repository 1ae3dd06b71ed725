#!/usr/bin/env bash
# A rank SIGKILLed during an all-reduce under OpenMPI's mpirun: mpirun ends the whole job at once
# (the survivors see no PeerLostError: they are killed), says which rank died of which signal,
# and exits 137 (128 + SIGKILL), well before the group's 10 s timeout.
#   killed_rank.sh MPIEXEC "FLAGS;..." dpx_mpi_tests
set -uo pipefail
mpiexec=$1
IFS=';' read -r -a flags <<< "$2"
tests=$3
start=$(date +%s%N)
out=$("$mpiexec" "${flags[@]}" -np 3 "$tests" --gtest_also_run_disabled_tests \
  --gtest_filter='MpiKilled.*' 2>&1)
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out" | tail -n 8
echo "exit status $rc after $ms ms"
[ "$rc" = 137 ] || { echo "FAIL: expected mpirun's exit status 137"; exit 1; }
grep -q "rank 2 .* exited on signal 9" <<< "$out" || { echo "FAIL: mpirun did not name rank 2"; exit 1; }
[ "$ms" -lt 8000 ] || { echo "FAIL: the job took $ms ms to end"; exit 1; }
echo PASS
