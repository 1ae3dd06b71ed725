#!/usr/bin/env bash
# The all-reduce comparison of docs/performance.md: dpx shm, dpx gloo and OpenMPI's
# MPI_Allreduce, alternated in one session (REPS rounds of every configuration), medians per size.
#   bench/compare_allreduce.sh [BUILD_DIR]    env: REPS=3 WORLDS="2 4" MAX_BYTES=268435456 SECS=0.1
# dpx ranks are pinned one per core when they fit (bench/run_local.sh --bind), as mpirun binds
# ranks to cores by default.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${REPS:-3}
worlds=${WORLDS:-"2 4"}
max=${MAX_BYTES:-268435456}
secs=${SECS:-0.1}
out=$(mktemp -d /tmp/dpx-allreduce-XXXXXX)
ncpu=$(nproc)
args=(--min-bytes 4 --max-bytes "$max" --seconds "$secs")
for rep in $(seq "$reps"); do
  for world in $worlds; do
    bind=()
    if [ "$world" -le "$ncpu" ]; then bind=(--bind); fi
    for cfg in shm gloo mpi; do
      echo "round $rep/$reps: $cfg, $world ranks" >&2
      if [ "$cfg" = mpi ]; then
        mpirun --oversubscribe --allow-run-as-root -np "$world" \
          "$build/bench/dpx-bench-mpi-allreduce" "${args[@]}" > "$out/$cfg-$world-$rep.txt"
      else
        bench/run_local.sh "$world" "${bind[@]}" "$build/bench/dpx-bench" allreduce \
          --backend "$cfg" "${args[@]}" > "$out/$cfg-$world-$rep.txt"
      fi
    done
  done
done
/usr/bin/python3 - "$out" $worlds <<'PY'
import glob, os, statistics, sys
out, worlds = sys.argv[1], sys.argv[2:]
def rows(path):
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            yield int(f[0]), float(f[2]), float(f[4])
for world in worlds:
    data = {}
    for cfg in ("shm", "gloo", "mpi"):
        for path in glob.glob(os.path.join(out, f"{cfg}-{world}-*.txt")):
            for size, us, busbw in rows(path):
                data.setdefault((cfg, size), []).append((us, busbw))
    sizes = sorted({s for (_, s) in data})
    med = lambda cfg, s, i: statistics.median(v[i] for v in data[(cfg, s)])
    print(f"\n{world} ranks (median of {len(data[('shm', sizes[0])])} runs)\n")
    print("| size | shm µs | gloo µs | MPI µs | shm busbw GB/s | gloo busbw | MPI busbw | shm vs gloo | shm vs MPI |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in sizes:
        t = {c: med(c, s, 0) for c in ("shm", "gloo", "mpi")}
        b = {c: med(c, s, 1) for c in ("shm", "gloo", "mpi")}
        name = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1 << 10 else f"{s} B"
        print(f"| {name} | {t['shm']:.2f} | {t['gloo']:.2f} | {t['mpi']:.2f} | {b['shm']:.3f} | "
              f"{b['gloo']:.3f} | {b['mpi']:.3f} | {t['gloo']/t['shm']:.1f}x | {t['mpi']/t['shm']:.2f}x |")
print(f"\nraw outputs: {out}", file=sys.stderr)
PY
