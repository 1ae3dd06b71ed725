#!/usr/bin/env bash
# The mpi backend's blocking data step (DPX_MPI_BLOCKING=1: OpenMPI's MPI_Allreduce runs, which
# mallocs a scratch buffer per call) under DPX_MALLOC=retain and =system, beside MPI_Allreduce
# alone: 2 ranks under mpirun, alternated in each of REPS rounds, medians per size
# (docs/performance.md, "The cache maps its own blocks"; Note [Blocks the cache lets go]).
# LIBS compares builds of libdpx.so with the same programs: label=folder pairs, the folders put
# first on LD_LIBRARY_PATH (a folder holding libdpx.so.0); unset, BUILD_DIR's own.
#   bench/mpi_malloc.sh [BUILD_DIR]    env: REPS=5 LIBS="before=/tmp/old after=build"
#   MIN_BYTES=65536 MAX_BYTES=4194304 SECS=0.05
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
libs=${LIBS:-"dpx=$build"}
out=$(mktemp -d /tmp/dpx-mpi-malloc-XXXXXX)
args=(--min-bytes "${MIN_BYTES:-65536}" --max-bytes "${MAX_BYTES:-4194304}" --seconds "${SECS:-0.05}")
mpi=(mpirun.openmpi --oversubscribe --allow-run-as-root -np 2)
for rep in $(seq "${REPS:-5}"); do
  echo "round $rep" >&2
  "${mpi[@]}" "$build/bench/dpx-bench-mpi-allreduce" "${args[@]}" > "$out/raw-$rep.txt"
  for lib in $libs; do
    for policy in retain system; do
      LD_LIBRARY_PATH="$(realpath "${lib#*=}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        DPX_MALLOC=$policy DPX_MPI_BLOCKING=1 "${mpi[@]}" -x LD_LIBRARY_PATH -x DPX_MALLOC \
        -x DPX_MPI_BLOCKING "$build/bench/dpx-bench" allreduce --backend mpi "${args[@]}" \
        > "$out/${lib%%=*}:$policy-$rep.txt"
    done
  done
done
/usr/bin/python3 - "$out" "$libs" <<'PY'
import glob, os, statistics, sys
out, libs = sys.argv[1], [l.split("=")[0] for l in sys.argv[2].split()]
data = {}
for path in glob.glob(os.path.join(out, "*.txt")):
    cfg = os.path.basename(path).rsplit("-", 1)[0]
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            data.setdefault((cfg, int(f[0])), []).append(float(f[2]))
cfgs = [f"{l}:{p}" for l in libs for p in ("retain", "system")]
sizes = sorted({s for _, s in data})
print(f"runs per cell: {len(data[('raw', sizes[0])])}; µs, medians; ratios against "
      "MPI_Allreduce alone in the same rounds\n")
print("| size | MPI_Allreduce µs | " + " | ".join(f"{c} µs" for c in cfgs) + " | "
      + " | ".join(f"{c} / MPI" for c in cfgs) + " |")
print("|---:|" + "---:|" * (1 + 2 * len(cfgs)))
for s in sizes:
    raw = statistics.median(data[("raw", s)])
    m = [statistics.median(data[(c, s)]) for c in cfgs]
    name = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1 << 10 else f"{s} B"
    print(f"| {name} | {raw:.2f} | " + " | ".join(f"{v:.2f}" for v in m) + " | "
          + " | ".join(f"{v / raw:.2f}x" for v in m) + " |")
PY
