#!/usr/bin/env bash
# The all-reduce comparison of docs/performance.md: dpx shm, dpx gloo, OpenMPI's MPI_Allreduce
# (mpi) and dpx's mpi backend over the same OpenMPI (dpx-mpi), alternated in one session (REPS
# rounds of every configuration), medians per size.
# With 2 ranks on 2 cores or more, each round also measures the floor (dpx-bench pingpong: one
# cache line between the two ranks' cores and back), and the table says how far each is above it.
#   bench/compare_allreduce.sh [BUILD_DIR]
#   env: REPS=3 WORLDS="2 4" MAX_BYTES=268435456 SECS=0.1 CONFIGS="shm gloo mpi" (or add dpx-mpi)
#   MIN_BYTES=4
# dpx ranks are pinned one per core when they fit (bench/run_local.sh --bind), as mpirun binds
# ranks to cores by default.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${REPS:-3}
worlds=${WORLDS:-"2 4"}
max=${MAX_BYTES:-268435456}
secs=${SECS:-0.1}
configs=${CONFIGS:-"shm gloo mpi"}
out=$(mktemp -d /tmp/dpx-allreduce-XXXXXX)
ncpu=$(nproc)
args=(--min-bytes "${MIN_BYTES:-4}" --max-bytes "$max" --seconds "$secs")
for rep in $(seq "$reps"); do
  for world in $worlds; do
    bind=()
    if [ "$world" -le "$ncpu" ]; then bind=(--bind); fi
    if [ "$world" = 2 ] && [ "$ncpu" -ge 2 ]; then
      echo "round $rep/$reps: pingpong floor" >&2
      "$build/bench/dpx-bench" pingpong --json > "$out/floor-$world-$rep.txt"
    fi
    for cfg in $configs; do
      echo "round $rep/$reps: $cfg, $world ranks" >&2
      # OpenMPI's launcher by its own name: an MPICH beside it can move Debian's `mpirun`.
      if [ "$cfg" = mpi ]; then
        mpirun.openmpi --oversubscribe --allow-run-as-root -np "$world" \
          "$build/bench/dpx-bench-mpi-allreduce" "${args[@]}" > "$out/$cfg-$world-$rep.txt"
      elif [ "$cfg" = dpx-mpi ]; then
        mpirun.openmpi --oversubscribe --allow-run-as-root -np "$world" \
          "$build/bench/dpx-bench" allreduce --backend mpi "${args[@]}" > "$out/$cfg-$world-$rep.txt"
      else
        bench/run_local.sh "$world" "${bind[@]}" "$build/bench/dpx-bench" allreduce \
          --backend "$cfg" "${args[@]}" > "$out/$cfg-$world-$rep.txt"
      fi
    done
  done
done
/usr/bin/python3 - "$out" "$configs" $worlds <<'PY'
import glob, json, os, statistics, sys
out, configs, worlds = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
def rows(path):
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit():
            yield int(f[0]), float(f[2]), float(f[4])
for world in worlds:
    data = {}
    for cfg in configs:
        for path in glob.glob(os.path.join(out, f"{cfg}-{world}-*.txt")):
            for size, us, busbw in rows(path):
                data.setdefault((cfg, size), []).append((us, busbw))
    floors = [json.load(open(p))["round_trip_us"]
              for p in glob.glob(os.path.join(out, f"floor-{world}-*.txt"))]
    sizes = sorted({s for (_, s) in data})
    med = lambda cfg, s, i: statistics.median(v[i] for v in data[(cfg, s)])
    print(f"\n{world} ranks (median of {len(data[(configs[0], sizes[0])])} runs)\n")
    floor = statistics.median(floors) if floors else None
    if floor:
        print(f"floor (pingpong, one cache line there and back): {floor:.3f} µs, median of "
              f"{len(floors)}\n")
    head = [f"{c} µs" for c in configs] + [f"{c} busbw GB/s" for c in configs]
    if "shm" in configs:
        head += [f"shm vs {c}" for c in configs if c != "shm"]
        if floor:
            head += ["shm / floor"]
    # The mpi backend's own cost: dpx over OpenMPI against OpenMPI alone.
    if "mpi" in configs and "dpx-mpi" in configs:
        head += ["dpx-mpi / mpi"]
    print("| size | " + " | ".join(head) + " |")
    print("|---:|" + "---:|" * len(head))
    for s in sizes:
        t = {c: med(c, s, 0) for c in configs}
        b = {c: med(c, s, 1) for c in configs}
        name = f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB" if s >= 1 << 10 else f"{s} B"
        cells = [f"{t[c]:.2f}" for c in configs] + [f"{b[c]:.3f}" for c in configs]
        if "shm" in configs:
            cells += [f"{t[c] / t['shm']:.2f}x" for c in configs if c != "shm"]
            if floor:
                cells += [f"{t['shm'] / floor:.2f}x"]
        if "mpi" in configs and "dpx-mpi" in configs:
            cells += [f"{t['dpx-mpi'] / t['mpi']:.2f}x"]
        print(f"| {name} | " + " | ".join(cells) + " |")
print(f"\nraw outputs: {out}", file=sys.stderr)
PY
