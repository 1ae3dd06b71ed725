#!/usr/bin/env bash
# State saved at one world size and resumed at another on the mpi backend: ZeRO's consolidated
# state, fully_shard's ShardedCheckpointer and DcpCheckpointer's checkpoints
# (tests/mpi/mpi_resume_test.cpp), saved by 2 ranks under one mpirun and loaded by 3 under
# another, in a fresh folder removed at exit.
#   resume.sh MPIEXEC "FLAGS;..." dpx_mpi_tests
set -uo pipefail
mpiexec=$1
IFS=';' read -r -a flags <<< "$2"
tests=$3
dir=$(mktemp -d /tmp/dpx-mpi-resume-XXXXXX)
trap 'rm -rf "$dir"' EXIT
export DPX_TEST_RESUME_DIR=$dir OMP_NUM_THREADS=1 GTEST_COLOR=no
run() {  # run NP FILTER: all three tests must run and pass (a skipped one is a failure here)
  echo "== $1 ranks: $2"
  out=$(timeout 100 "$mpiexec" "${flags[@]}" -np "$1" "$tests" --gtest_also_run_disabled_tests \
    --gtest_filter="$2" 2>&1)
  local rc=$?
  echo "$out" | tail -n 30
  [ "$rc" = 0 ] || { echo "mpi resume: FAIL (exit $rc at $1 ranks)"; exit 1; }
  grep -q 'PASSED  \] 3 tests' <<< "$out" && ! grep -q SKIPPED <<< "$out" ||
    { echo "mpi resume: FAIL (at $1 ranks the three tests did not all run and pass)"; exit 1; }
}
run 2 'MpiResume.DISABLED_Save*'
run 3 'MpiResume.DISABLED_Load*'
echo "mpi resume: PASS"
