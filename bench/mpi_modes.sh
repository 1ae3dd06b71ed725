#!/usr/bin/env bash
# The mpi backend's data step, default (non-blocking: dpx's ring from 4 KiB up at 2 ranks) against
# DPX_MPI_RING=0 (OpenMPI's MPI_Iallreduce at every size) and DPX_MPI_BLOCKING=1, beside
# MPI_Allreduce alone: 2 ranks under mpirun (NP=3, 4 for more), alternated in each of REPS
# rounds, medians per size (docs/performance.md, issue #43). DPX_MALLOC=system for all, as in the
# runs recorded before the block cache mapped its own blocks (bench/mpi_malloc.sh compares the
# two policies).
#   bench/mpi_modes.sh [BUILD_DIR]     env: REPS=5
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=$(mktemp -d /tmp/dpx-mpi-modes-XXXXXX)
args="--min-bytes 4 --max-bytes 4194304 --seconds 0.05"
export DPX_MALLOC=system
for rep in $(seq "${REPS:-5}"); do
  run="mpirun.openmpi --allow-run-as-root --oversubscribe -np ${NP:-2}"
  $run "$build"/bench/dpx-bench-mpi-allreduce $args > $out/raw-$rep.txt
  $run "$build"/bench/dpx-bench allreduce --backend mpi $args > $out/nb-$rep.txt
  DPX_MPI_RING=0 $run "$build"/bench/dpx-bench allreduce --backend mpi $args > $out/nbc-$rep.txt
  DPX_MPI_BLOCKING=1 $run "$build"/bench/dpx-bench allreduce --backend mpi $args > $out/bl-$rep.txt
done
python3 - "$out" <<'PY'
import glob,statistics,sys
out=sys.argv[1]
d={}
for p in glob.glob(out+'/*.txt'):
    k=p.split('/')[-1].split('-')[0]
    for l in open(p):
        f=l.split()
        if f and f[0].isdigit(): d.setdefault((k,int(f[0])),[]).append(float(f[2]))
sizes=sorted({s for _,s in d})
print('| size | MPI_Allreduce µs | dpx mpi (default) µs | DPX_MPI_RING=0 µs | DPX_MPI_BLOCKING=1 µs | default / MPI | ring=0 / MPI | blocking / MPI |')
print('|---:|---:|---:|---:|---:|---:|---:|---:|')
for s in sizes:
    m={k:statistics.median(d[(k,s)]) for k in ('raw','nb','nbc','bl')}
    name = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1 << 10 else f"{s} B"
    print(f"| {name} | {m['raw']:.2f} | {m['nb']:.2f} | {m['nbc']:.2f} | {m['bl']:.2f} | {m['nb']/m['raw']:.2f}x | {m['nbc']/m['raw']:.2f}x | {m['bl']/m['raw']:.2f}x |")
print('runs per cell:', len(d[('raw',4)]))
PY
