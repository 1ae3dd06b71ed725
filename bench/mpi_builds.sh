#!/usr/bin/env bash
# dpx's mpi all-reduce with several libdpx builds against raw MPI_Allreduce, 2 ranks under
# mpirun bound one per core: in each of ROUNDS rounds raw MPI first, then every build in an order
# rotated each round (LD_LIBRARY_PATH switches them under one dpx-bench), and per size the
# median over rounds of each build / raw and of each build / the first build
# (docs/performance.md, issue #43). Give a build twice (two folders holding copies of the same
# library) for the run's own noise.
#   bench/mpi_builds.sh BUILD_DIR LIBDIR[:DPX_MALLOC] [LIBDIR[:DPX_MALLOC] ...]
#   (LIBDIR holds a libdpx.so.0; BUILD_DIR gives dpx-bench and dpx-bench-mpi-allreduce;
#   DPX_MALLOC system unless given)
#   env: ROUNDS=11 SECS=0.2 MIN_BYTES=4 MAX_BYTES=262144
set -euo pipefail
build=$(realpath "${1:?usage: mpi_builds.sh BUILD_DIR LIBDIR[:DPX_MALLOC] ...}")
shift
(($# > 0)) || { echo "mpi_builds.sh: name at least one LIBDIR" >&2; exit 2; }
dirs=()
mallocs=()
for b in "$@"; do
  dir=${b%%:*}
  malloc=system
  [ "$b" != "$dir" ] && malloc=${b#*:}
  # A folder without the library would silently measure BUILD_DIR's own (the RUNPATH).
  [ -f "$dir/libdpx.so.0" ] || { echo "mpi_builds.sh: no libdpx.so.0 in $dir" >&2; exit 2; }
  dirs+=("$(realpath "$dir")")
  mallocs+=("$malloc")
done
builds=("$@")
rounds=${ROUNDS:-11}
((rounds >= 1)) || { echo "mpi_builds.sh: ROUNDS must be at least 1" >&2; exit 2; }
for b in dpx-bench dpx-bench-mpi-allreduce; do
  [ -x "$build/bench/$b" ] || { echo "mpi_builds.sh: no $build/bench/$b (build it)" >&2; exit 2; }
done
sizes=(--min-bytes "${MIN_BYTES:-4}" --max-bytes "${MAX_BYTES:-262144}" --seconds "${SECS:-0.2}")
out=$(mktemp -d /tmp/dpx-mpi-builds-XXXXXX)
trap 'rm -rf "$out"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun.openmpi -np 2 --bind-to core)  # OpenMPI's own name (an MPICH can move `mpirun`)
for r in $(seq "$rounds"); do
  echo "round $r/$rounds" >&2
  "${mpirun[@]}" "$build/bench/dpx-bench-mpi-allreduce" "${sizes[@]}" > "$out/raw-$r.txt"
  n=${#builds[@]}
  for ((s = 0; s < n; ++s)); do
    i=$(((r + s) % n))  # the order rotated each round
    "${mpirun[@]}" -x LD_LIBRARY_PATH="${dirs[$i]}" -x DPX_MALLOC="${mallocs[$i]}" \
      "$build/bench/dpx-bench" allreduce --backend mpi "${sizes[@]}" > "$out/build$i-$r.txt"
  done
done
/usr/bin/python3 - "$out" "$rounds" "${builds[@]}" <<'PY'
import statistics, sys
out, rounds, builds = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def times(path):
    d = {}
    for line in open(path):
        f = line.split()
        if len(f) > 2 and f[0].isdigit():
            d[int(f[0])] = float(f[2])
    return d
raw = [times(f"{out}/raw-{r}.txt") for r in range(1, rounds + 1)]
dpx = [[times(f"{out}/build{i}-{r}.txt") for r in range(1, rounds + 1)] for i in range(len(builds))]
print(f"# 2 ranks, float32 sum, {rounds} rounds; medians over rounds; builds:")
for i, b in enumerate(builds):
    print(f"#   {i}: {b}")
head = "size(B) raw_us" + "".join(f" b{i}/raw" for i in range(len(builds)))
head += "".join(f" b{i}/b0" for i in range(1, len(builds)))
print(head)
for s in sorted(raw[0]):
    med = lambda xs: statistics.median(xs)
    line = f"{s} {med(r[s] for r in raw):.2f}"
    line += "".join(f" {med(d[k][s] / raw[k][s] for k in range(rounds)):.3f}" for d in dpx)
    line += "".join(
        f" {med(d[k][s] / dpx[0][k][s] for k in range(rounds)):.3f}" for d in dpx[1:])
    print(line)
PY
