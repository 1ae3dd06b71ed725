#!/usr/bin/env bash
# DDP over shm, gloo and mpi on the `dpx-bench ddp` models (issue #43), alternated in one run:
# ROUNDS rounds, each model and backend in turn (the backends' order rotated each round), WORLD
# ranks of 1 intra-op thread. shm and gloo start under dpxrun, mpi under OpenMPI's mpirun (which
# binds each rank to a core); each is `dpx-bench ddp-job`, whose rank 0 prints samples/s and
# DDP's communication and exposed communication per step. Prints a line per run, then per
# model and backend the medians, and the exposed share (exposed / communication) against shm's.
# hierarchical-mpi (shm inside the host, MPI among the hosts' leaders) starts under mpirun too,
# with a store on a free port for its shm groups. To tell a backend from the launcher's core
# binding: NAME@mpirun starts a store backend under mpirun (bound to a core per rank, a store
# on a free port), mpi@unbound starts mpi with `--bind-to none`. mpi:DIR runs mpi with the
# libdpx.so.0 in DIR (another build of dpx, e.g. before a change) under the same dpx-bench.
#   bench/ddp_backends.sh [BUILD_DIR]     env: ROUNDS=3 WORLD=2 MODELS="cnn mlp" STEPS=10
#                                              BACKENDS="shm gloo mpi" (shm first or among them)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${ROUNDS:-3} world=${WORLD:-2} steps=${STEPS:-10}
out=$(mktemp -d /tmp/dpx-ddp-backends-XXXXXX)
export OMP_NUM_THREADS=1
read -r -a backends <<< "${BACKENDS:-shm gloo mpi}"
n=${#backends[@]}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
echo "# dpx-bench ddp-job, $world ranks x 1 thread, $steps steps, $rounds rounds; logs in $out"
for round in $(seq 0 $((rounds - 1))); do
  for model in ${MODELS:-cnn mlp}; do
    for i in $(seq 0 $((n - 1))); do
      spec=${backends[$(( (i + round) % n ))]}
      b=${spec%@*}
      b=${b%%:*}
      mpirun=(mpirun.openmpi --allow-run-as-root --oversubscribe -np "$world" -x OMP_NUM_THREADS)
      case "$spec" in
        mpi) launcher=("${mpirun[@]}") ;;
        mpi@unbound) launcher=("${mpirun[@]}" --bind-to none) ;;
        mpi:*) launcher=("${mpirun[@]}" -x LD_LIBRARY_PATH="${spec#mpi:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
        hierarchical-mpi|*@mpirun)
          launcher=("${mpirun[@]}" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$(free_port)") ;;
        *) launcher=("$build/tools/dpxrun/dpxrun" --standalone --nproc-per-node "$world") ;;
      esac
      log=$out/$model-${spec//\//_}-$round.log
      "${launcher[@]}" "$build/bench/dpx-bench" ddp-job --backend "$b" --model "$model" \
        --steps "$steps" > "$log" 2>&1 || { echo "$spec $model round $round failed:" >&2; tail -n 5 "$log" >&2; exit 1; }
      line=$(grep -o 'ddp-job model .*' "$log")
      echo "round $round $spec $line"
      echo "round $round $spec $line" >> "$out/runs.txt"
    done
  done
done
python3 - "$out/runs.txt" "${backends[@]}" <<'PY'
import re, statistics, sys
runs = {}
for l in open(sys.argv[1]):
    m = re.search(r"^round (\d+) (\S+) .*model (\w+) backend \S+ .*samples/s ([\d.]+) comm_ms ([\d.]+) exposed_ms ([\d.]+)", l)
    rnd, b, model = int(m.group(1)), m.group(2), m.group(3)
    sps, comm, exp = map(float, m.groups()[3:])
    runs.setdefault((model, b), {})[rnd] = (sps, comm, exp)
for model in sorted({k[0] for k in runs}):
    print(f"\n{model}: | backend | samples/s | comm ms/step | exposed ms/step | exposed share | share / shm's | samples/s vs shm | share / shm's, per round |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    med = {b: [statistics.median(r[k] for r in runs[(model, b)].values()) for k in range(3)]
           for (m2, b) in runs if m2 == model}
    shm = runs[(model, "shm")]
    for b in sys.argv[2:]:
        if b not in med: continue
        sps, comm, exp = med[b]
        share, shm_share = exp / comm, med["shm"][2] / med["shm"][1]
        # The same round's shm run is the baseline of each round's ratio.
        per = [(e / c) / (shm[r][2] / shm[r][1]) for r, (_, c, e) in sorted(runs[(model, b)].items())]
        print(f"| {b} | {sps:.1f} | {comm:.2f} | {exp:.2f} | {share:.3f} | {share / shm_share:.2f} | "
              f"{sps / med['shm'][0]:.3f} | {statistics.median(per):.2f} ({', '.join(f'{x:.2f}' for x in per)}) |")
PY
