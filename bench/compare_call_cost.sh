#!/usr/bin/env bash
# Issue #47's alternated measurement of one small collective's cost (docs/performance.md): dpx's
# shm all-reduce with each of several libdpx builds (LD_LIBRARY_PATH switches them under one
# dpx-bench), on 1 rank (the call alone) and 2 pinned ranks, OpenMPI's MPI_Allreduce and the
# floor (dpx-bench pingpong) in every round; medians of REPS rounds, ratios to the first build.
#   bench/compare_call_cost.sh BUILD_DIR NAME=LIBDIR [NAME=LIBDIR ...]
#   (LIBDIR holds a libdpx.so.0; BUILD_DIR gives dpx-bench and dpx-bench-mpi-allreduce)
#   env: REPS=5 ITERS=50000 ONE_ITERS=1000000 MIN_BYTES=4 MAX_BYTES=4096 FAR_US=0.2
#   extra dpx-bench environment per build: NAME=LIBDIR:VAR=VALUE[:VAR=VALUE...]
#   (e.g. DPX_STALL_CHECK_SECONDS=0)
# The floor is measured before and after every 2-rank run too: on a VM whose vCPUs move between a
# near and a far placement (docs/performance.md, issue #47) every time per line moves with it, so
# a second table compares only runs whose floors on both sides are in the same state (far:
# round trip >= FAR_US).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: compare_call_cost.sh BUILD_DIR NAME=LIBDIR [NAME=LIBDIR ...]}
shift
reps=${REPS:-5}
iters=${ITERS:-50000}
one_iters=${ONE_ITERS:-1000000}
min=${MIN_BYTES:-4}
max=${MAX_BYTES:-4096}
out=$(mktemp -d /tmp/dpx-callcost-XXXXXX)
names=()
floor() { "$build/bench/dpx-bench" pingpong --json > "$out/floor-$1-$rep.txt"; }
for rep in $(seq "$reps"); do
  echo "round $rep/$reps" >&2
  floor before-mpi
  mpirun.openmpi --allow-run-as-root -np 2 "$build/bench/dpx-bench-mpi-allreduce" \
    --min-bytes "$min" --max-bytes "$max" --iters "$iters" > "$out/mpi-2-$rep.txt"
  floor after-mpi
  for spec in "$@"; do
    name=${spec%%=*}
    rest=${spec#*=}
    lib=${rest%%:*}
    envs=()
    [ "$rest" != "$lib" ] && IFS=: read -r -a envs <<< "${rest#*:}"
    [ "$rep" = 1 ] && names+=("$name")
    env LD_LIBRARY_PATH="$lib" "${envs[@]}" bench/run_local.sh 1 --bind "$build/bench/dpx-bench" \
      allreduce --backend shm --min-bytes 4 --max-bytes 4 --iters "$one_iters" --json \
      > "$out/$name-1-$rep.txt"
    floor "before-$name"
    env LD_LIBRARY_PATH="$lib" "${envs[@]}" bench/run_local.sh 2 --bind "$build/bench/dpx-bench" \
      allreduce --backend shm --min-bytes "$min" --max-bytes "$max" --iters "$iters" --json \
      > "$out/$name-2-$rep.txt"
    floor "after-$name"
  done
done
/usr/bin/python3 - "$out" "${FAR_US:-0.2}" "${names[@]}" <<'PY'
import glob, json, os, statistics, sys
out, far_us, names = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
def floor_at(path):
    return json.load(open(path))["round_trip_us"]
def state(name, rep):  # "near" or "far" when the floors on both sides of the run agree
    s = {floor_at(os.path.join(out, f"floor-{when}-{name}-{rep}.txt")) >= far_us
         for when in ("before", "after")}
    return None if len(s) > 1 else ("far" if s.pop() else "near")
def times(pattern, keep=lambda path: True):  # dpx-bench's JSON or the MPI program's table
    t = {}
    for path in filter(keep, glob.glob(os.path.join(out, pattern))):
        text = open(path).read()
        if text.lstrip().startswith("{"):
            rows = [(r["bytes"], r["time_us"]) for r in json.loads(text)["results"]]
        else:
            rows = [(int(f[0]), float(f[2])) for f in map(str.split, text.splitlines())
                    if f and f[0].isdigit()]
        for size, us in rows:
            t.setdefault(size, []).append(us)
    return {s: statistics.median(v) for s, v in t.items()}
floor = statistics.median(floor_at(p) for p in glob.glob(os.path.join(out, "floor-*.txt")))
one = {n: times(f"{n}-1-*.txt")[4] for n in names}
two = {n: times(f"{n}-2-*.txt") for n in names}
mpi = times("mpi-2-*.txt")
print(f"floor (pingpong): {floor:.3f} µs; 1 rank, 4 B (the call alone): " +
      ", ".join(f"{n} {one[n]:.3f} µs ({one[n] / one[names[0]]:.3f})" for n in names))
head = [f"{n} µs" for n in names] + ["OpenMPI µs"] + [f"{n} / {names[0]}" for n in names[1:]]
head += [f"OpenMPI / {n}" for n in names] + [f"{names[-1]} / floor"]
print("\n| size | " + " | ".join(head) + " |\n|---:|" + "---:|" * len(head))
for s in sorted(mpi):
    label = f"{s >> 10} KiB" if s >= 1024 else f"{s} B"
    cells = [f"{two[n][s]:.3f}" for n in names] + [f"{mpi[s]:.2f}"]
    cells += [f"{two[n][s] / two[names[0]][s]:.3f}" for n in names[1:]]
    cells += [f"{mpi[s] / two[n][s]:.2f}x" for n in names] + [f"{two[names[-1]][s] / floor:.2f}x"]
    print(f"| {label} | " + " | ".join(cells) + " |")
for st in ("near", "far"):
    def keep(path, st=st):
        name, _, rep = os.path.basename(path)[:-4].rpartition("-")
        return state(name.rpartition("-")[0], rep) == st
    two = {n: times(f"{n}-2-*.txt", keep) for n in names}
    mpi = times("mpi-2-*.txt", keep)
    runs = {n: sum(map(keep, glob.glob(os.path.join(out, f"{n}-2-*.txt")))) for n in names + ["mpi"]}
    print(f"\nruns whose floors before and after were both {st} (round trip "
          f"{'>=' if st == 'far' else '<'} {far_us} µs): " + ", ".join(f"{n} {k}" for n, k in runs.items()))
    seen = [n for n in names if two[n]]
    if not mpi or not seen:
        continue
    head = [f"{n} µs" for n in seen] + ["OpenMPI µs"] + [f"OpenMPI / {n}" for n in seen]
    print("\n| size | " + " | ".join(head) + " |\n|---:|" + "---:|" * len(head))
    for s in sorted(mpi):
        label = f"{s >> 10} KiB" if s >= 1024 else f"{s} B"
        cells = [f"{two[n][s]:.3f}" for n in seen] + [f"{mpi[s]:.2f}"]
        cells += [f"{mpi[s] / two[n][s]:.2f}x" for n in seen]
        print(f"| {label} | " + " | ".join(cells) + " |")
print(f"\nraw outputs: {out}", file=sys.stderr)
PY
