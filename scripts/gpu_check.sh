#!/usr/bin/env bash
# Every GPU check of dpx in ONE command, for a machine with an NVIDIA GPU, PyTorch with CUDA,
# nvcc, CMake and Ninja, and no package registry: it builds dpx there against that machine's
# torch, runs the CUDA tests that one GPU can run, the example and the GPU benchmarks.
#
#   bash scripts/gpu_check.sh pack           here (a Debian machine with dpx's packages,
#                                            scripts/setup.sh): copies what a GPU image lacks
#                                            (GoogleTest's sources; CLI11's, nlohmann_json's,
#                                            Gloo's and zlib's headers; Fashion-MNIST: 36 MB)
#                                            into build-gpu-deps/ (ignored by git), to take along
#   bash scripts/gpu_check.sh plan           the steps, in order, with their time budgets
#   bash scripts/gpu_check.sh dry-run BUILD  every step without a GPU, against BUILD's binaries:
#                                            each command is checked and printed, not run; each
#                                            gtest filter must match tests (CTest
#                                            scripts.gpu_check_dry_run, so CI finds the script's
#                                            own mistakes before a GPU is at hand)
#   bash scripts/gpu_check.sh selftest       a step out of time: its report and its processes ended
#   bash scripts/gpu_check.sh all [RESULTS]  on the GPU machine: every step, under one deadline
#
# Steps run in priority order: the build; NCCL's correctness with several ranks (they share the
# one GPU, each a host of its own to NCCL: Note [NCCL ranks sharing a GPU] in
# tests/support/nccl_ranks.h); NCCL's failure paths; the example over NCCL; the other GPU tests;
# the example; the benchmarks. Each has a budget (`plan`); a step gets its budget or what is left
# of the deadline (GPU_CHECK_SECONDS, default 570), whichever is less, and what no longer fits is
# reported as not run. A step that runs out of time is reported where it hung before it is ended
# with every process below it (STEP_stuck.txt: scripts/where_stuck.sh). GPU_CHECK_STEPS (names
# from `plan`, space-separated) runs only those steps, and builds only what they need. After each step RESULTS (default $OUT, else runs/gpu) holds what ran so
# far in three files: summary.json and summary.txt (the GPU, driver, PyTorch, commit; every
# step: status, seconds, budget, detail) and logs.tar.gz (every log, each step's gtest XML, the
# benchmarks' output), so a call that is killed still returns them. Without a GPU `all` says so
# in one line and exits 1. Python: DPX_PYTHON, else the first python3/python on PATH whose torch
# has CUDA. The commit: DPX_COMMIT, else git's (a GPU machine's copy may carry a stale .git).
set -uo pipefail
cd "$(dirname "$0")/.."
deps="$PWD/build-gpu-deps"
work="$PWD/build-gpu/check"
deadline_s=${GPU_CHECK_SECONDS:-570}
start=$SECONDS

# name budget(s) what
steps=(
  "build 190 configure and build dpx, its tests, the example and dpx-bench (DPX_CUDA=ON)"
  "nccl 43 DDP (2, 3 ranks), fully_shard, SyncBatchNorm, ZeRO, PowerSGD, join over nccl"
  "conformance_nccl 133 the conformance suite's nccl instances"
  "nccl_faults 35 nccl: a killed rank, a stopped rank: typed errors, no hang"
  "example_nccl 11 the example over nccl, 2 workers sharing the GPU, 1 epoch: at least 85%"
  "unit 5 unit tests that need a GPU"
  "multirank 8 threads-as-ranks tests on the GPU: staged groups, nccl on one rank"
  "multiproc 36 process tests on the GPU over staged groups, the launcher, the example's CLI"
  "bench_ddp 80 DDP step, 1 round: 1 rank, reduction on (views or not), against plain; 2 nccl ranks against 2 plain processes"
  "example 6 the example on the GPU, 2 workers, shm-staged, 1 epoch: at least 85%"
  "bench_allreduce 15 all-reduce: nccl on 1 rank, 2 ranks shm-staged on the GPU, 2 CPU ranks"
  "bench_dp 8 DataParallel: 2 replicas sharing cuda:0 against the module alone there"
)

# GPU_CHECK_STEPS="nccl_faults bench_ddp": only those steps (and the build), in plan order.
if [ -n "${GPU_CHECK_STEPS:-}" ]; then
  chosen=("${steps[0]}")
  for want in $GPU_CHECK_STEPS; do
    printf '%s\n' "${steps[@]}" | grep -q "^$want " ||
      { echo "gpu_check: GPU_CHECK_STEPS names '$want', which is no step (gpu_check.sh plan)" >&2; exit 2; }
  done
  for s in "${steps[@]:1}"; do
    [[ " $GPU_CHECK_STEPS " == *" ${s%% *} "* ]] && chosen+=("$s")
  done
  steps=("${chosen[@]}")
fi

plan() {
  local total=0 s name budget what
  echo "gpu_check all: deadline ${deadline_s} s (GPU_CHECK_SECONDS)"
  for s in "${steps[@]}"; do
    read -r name budget what <<<"$s"
    printf '  %-16s %4s s  %s\n' "$name" "$budget" "$what"
    total=$((total + budget))
  done
  echo "  budgets add up to ${total} s"
  ((total <= deadline_s)) || { echo "gpu_check: the budgets exceed the deadline" >&2; return 1; }
}

pack() {
  rm -rf "$deps"
  mkdir -p "$deps/prefix/include" "$deps/prefix/share/cmake" "$deps/zlib/include" "$deps/zlib/lib"
  cp -r /usr/src/googletest "$deps/googletest"
  # Gloo's headers: c10d's ProcessGroupGloo.hpp includes them, and PyPI's torch wheels lack them.
  cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/gloo "$deps/prefix/include/"
  cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$deps/prefix/share/cmake/"
  cp -r /usr/share/datasets/fashion-mnist "$deps/fashion-mnist"
  # zlib's headers, for an image with only the runtime library (its libz.so.1 is used there).
  cp /usr/include/zlib.h /usr/include/zconf.h "$deps/zlib/include/"
  cp -L /usr/lib/x86_64-linux-gnu/libz.so "$deps/zlib/lib/libz.so"
  du -sh "$deps"
}

# The Python whose torch dpx builds against and whose PyTorch the oracle tests run.
python_with_cuda_torch() {
  if [ -n "${DPX_PYTHON:-}" ]; then
    "$DPX_PYTHON" -c 'import torch' 2>/dev/null && { echo "$DPX_PYTHON"; return 0; }
    echo "DPX_PYTHON=$DPX_PYTHON does not import torch"
    return 1
  fi
  local p
  for p in $(type -ap python3 python) /usr/bin/python3; do
    if "$p" -c 'import sys, torch; sys.exit(not torch.backends.cuda.is_built())' 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  echo "no python3 on PATH imports a torch built with CUDA; set DPX_PYTHON"
  return 1
}

# Runs a command for at most the step's budget and never past the deadline: 124 when it was
# killed for time, 125 when no time was left to start it. In a dry run the command is checked
# (its program exists) and printed instead.
limited() {
  local limit=$1
  shift
  if ((dry)); then
    local prog=$1
    [ "$prog" = bash ] && prog=$2
    [ -x "$prog" ] || [ -f "$prog" ] || command -v "$prog" >/dev/null ||
      { echo "dry-run: '$prog' does not exist" | tee -a "$work/summary.txt"; return 1; }
    echo "dry-run: would run for at most ${limit} s: $*" | tee -a "$work/summary.txt"
    return 0
  fi
  local left=$((deadline_s - (SECONDS - start) - 5))
  ((left < limit)) && limit=$left
  ((limit >= 10)) || return 125
  "$@" &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null; do
    if ((waited >= limit)); then
      # Out of time: say where every process of the step is before ending them all (a test's
      # ranks too, which would otherwise outlive it and hold the GPU in the next steps).
      timeout 20 bash scripts/where_stuck.sh "$pid" 4 >"$work/${current}_stuck.txt" 2>&1
      end_tree "$pid"
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 1
    ((++waited))
  done
  wait "$pid"
}

# SIGKILL to a process and everything below it (scripts/process_tree.sh).
end_tree() {
  local all
  mapfile -t all < <(bash scripts/process_tree.sh "$1")
  kill -STOP "${all[@]}" 2>/dev/null  # none forks or restarts another while the rest go
  kill -KILL "${all[@]}" 2>/dev/null
}

say() { echo "gpu_check: $*" | tee -a "$work/summary.txt"; }

# Appends a step's result to summary.json and copies what ran so far to the results folder.
record() {
  local name=$1 status=$2 seconds=$3 budget=$4 detail=$5
  "$PY" - "$work/summary.json" "$name" "$status" "$seconds" "$budget" "$detail" <<'PY'
import json, sys
path, name, status, seconds, budget, detail = sys.argv[1:]
doc = json.load(open(path))
doc["steps"].append({"name": name, "status": status, "seconds": int(seconds),
                     "budget_s": int(budget), "detail": detail})
json.dump(doc, open(path, "w"), indent=1)
PY
  say "$name: $status in ${seconds} s (budget ${budget} s)${detail:+: $detail}"
  cp "$work/summary.json" "$work/summary.txt" "$results/"
  tar czf "$results/logs.tar.gz" -C "$work" --exclude='*.tar.gz' . 2>/dev/null
}

# What each step needs built; the build makes what the chosen steps need (GPU_CHECK_STEPS).
declare -A needs=([nccl]=dpx_multiproc_tests [conformance_nccl]=dpx_conformance_tests
                  [nccl_faults]=dpx_multiproc_tests [example_nccl]="fashion_mnist dpxrun"
                  [unit]=dpx_unit_tests [multirank]=dpx_multirank_tests
                  [multiproc]="dpx_multiproc_tests fashion_mnist dpxrun"
                  [bench_ddp]=dpx-bench [example]="fashion_mnist dpxrun" [bench_allreduce]=dpx-bench
                  [bench_dp]=dpx-bench)
targets=()
for s in "${steps[@]}"; do
  read -r name _ <<<"$s"
  [ "$name" = build ] && continue
  for t in ${needs[$name]}; do
    [[ " ${targets[*]} " == *" $t "* ]] || targets+=("$t")
  done
done

step_build() {
  local rc=0 t
  if ((dry)); then
    for t in "${targets[@]}"; do
      cmake --build "$bin" --target help | grep -q "^$t:" ||
        { detail="$bin has no target $t"; return 1; }
    done
    return 0
  fi
  if ! find "$deps/prefix" -name 'GTestConfig.cmake' | grep -q .; then
    # A build folder configured elsewhere names that machine's tools (its ninja): start afresh.
    rm -rf "$deps/gtest-build"
    { cmake -S "$deps/googletest" -B "$deps/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_INSTALL_PREFIX="$deps/prefix" && limited "$1" cmake --build "$deps/gtest-build" \
        --target install; } >"$work/gtest_build.log" 2>&1 || { rc=$?; failed_log gtest_build; return $rc; }
  fi
  local zlib=()
  [ -f /usr/include/zlib.h ] || zlib=(-DZLIB_ROOT="$deps/zlib")
  mkdir -p "$bin"
  cmake -S . -B "$bin" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPX_CUDA=ON "${zlib[@]}" \
    -DCMAKE_PREFIX_PATH="$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)');$deps/prefix" \
    -DDPX_PYTHON="$PY" >"$work/configure.log" 2>&1 || { rc=$?; failed_log configure; return $rc; }
  grep 'dpx:' "$work/configure.log" | tee -a "$work/summary.txt"
  limited "$1" cmake --build "$bin" -j "$(nproc)" --target "${targets[@]}" >"$work/build.log" 2>&1 ||
    { rc=$?; failed_log build; return $rc; }
}

# The detail of a failed step: its log's name and the first error, else its last line.
failed_log() {
  local first
  first="$(grep -m1 -E 'error:|FAILED:|CMake Error|Error [0-9]' "$work/$1.log")"
  detail="$1.log: ${first:-$(tail -n 1 "$work/$1.log")}"
}

# The test steps: each runs one test binary (tests/dpx_<tier>_tests) with a gtest filter. Every
# test that needs a GPU has Cuda or Nccl in its suite's name, or /nccl in its parameter's, or is
# named here (each skips without a GPU elsewhere, so here it must run); Cli.Example* runs the
# example's CLI. A filter's patterns are each checked to match a test; a `-` part excludes.
declare -A tiers=([nccl]=multiproc [conformance_nccl]=conformance [nccl_faults]=multiproc
                  [unit]=unit [multirank]=multirank [multiproc]=multiproc)
declare -A filters=(
  [nccl]='*/nccl:DdpCuda.OneRankOverNccl*'
  [conformance_nccl]='Backends/*/nccl'
  [nccl_faults]='NcclFaults.*'
  [unit]='*Cuda*:BackendChoice.AGpu*:BackendChoice.AutoOnAGpu*:CheckpointTest.MapLocation*'
  [multirank]='*Cuda*:*Nccl*:Staged*'
  [multiproc]='*Cuda*:Cli.Example*-*/nccl:NcclFaults.*:DdpCuda.OneRankOverNccl*'
)

# Prints each pattern of a step's filter (before any `-`) that matches no test of BIN: a renamed
# test must not drop out of the check.
unmatched() {
  local exe=$1 name=$2 pattern positive=${filters[$2]%%-*}
  for pattern in ${positive//:/ }; do
    "$exe" --gtest_list_tests --gtest_filter="$pattern" | grep -q '^  ' ||
      echo "the pattern '$pattern' matches no ${tiers[$name]} test"
  done
}

# One test binary with its step's filter, results as XML. Fails when the binary fails, runs out
# of time, or a pattern of the filter matches no test.
gtest() {
  local name=$1 limit=$2 exe="$bin/tests/dpx_${tiers[$1]}_tests" status=0 bad filter=${filters[$1]}
  [ -x "$exe" ] || { detail="$exe was not built"; return 1; }
  bad=$(unmatched "$exe" "$name")
  [ -z "$bad" ] || { say "$bad"; status=1; }
  if ((dry)); then
    detail="$("$exe" --gtest_list_tests --gtest_filter="$filter" | grep -c '^  ') tests"
    limited "$limit" "$exe" --gtest_filter="$filter" || status=$?
    return "$status"
  fi
  limited "$limit" "$exe" --gtest_filter="$filter" --gtest_output="xml:$work/$name.xml" \
    >"$work/$name.txt" 2>&1 || status=$?
  grep -hE '^\[ +(FAILED|SKIPPED) +\] .*\)$' "$work/$name.txt" | tee -a "$work/summary.txt"
  detail="$(grep -c '^\[       OK \]' "$work/$name.txt") passed, $(grep -c '^\[  FAILED  \] .*)$' \
    "$work/$name.txt") failed, $(grep -c '^\[  SKIPPED \] .*)$' "$work/$name.txt") skipped"
  return "$status"
}

step_nccl() { gtest nccl "$1"; }
step_conformance_nccl() { gtest conformance_nccl "$1"; }
step_nccl_faults() { gtest nccl_faults "$1"; }
step_unit() { gtest unit "$1"; }
step_multirank() { gtest multirank "$1"; }
step_multiproc() { gtest multiproc "$1"; }

# The example on the GPU, 2 workers sharing it, one epoch: its test accuracy must reach 85%
# (the CPU build reaches 88-89% after one epoch), over the backend it must have used (the DDP
# statistics in its metrics name it). `runner`: what dpxrun starts, with the example's path and
# flags as its arguments; `flags`: the example's own, added to the common ones.
run_example() {
  local limit=$1 backend=$2 log=$3 run_dir status=0
  run_dir="$(mktemp -d)"
  limited "$limit" "$bin/tools/dpxrun/dpxrun" --standalone --nproc-per-node 2 "${runner[@]}" \
    "$bin/examples/fashion_mnist/fashion_mnist" --device cuda --epochs 1 "${flags[@]}" \
    --data-dir "$deps/fashion-mnist" --checkpoint-dir "$run_dir/ckpt" \
    --metrics-file "$run_dir/metrics.jsonl" >"$work/$log.txt" 2>&1 || status=$?
  cp "$run_dir/metrics.jsonl" "$work/${log}_metrics.jsonl" 2>/dev/null
  rm -rf "$run_dir"
  ((status == 0)) || { detail="exit $status; $(tail -n 1 "$work/$log.txt")"; return "$status"; }
  ((dry)) && return 0
  detail="$("$PY" - "$work/${log}_metrics.jsonl" "$backend" <<'PY'
import json, sys
records = list(map(json.loads, open(sys.argv[1])))
evals = [r for r in records if r.get("type") == "eval"]
backends = {r["stats"]["backend_name"] for r in records if r.get("type") == "ddp"}
if not evals:
    print("the example wrote no test accuracy"); sys.exit(1)
acc = evals[-1]["test_accuracy"]
bad = acc < 0.85 or backends != {sys.argv[2]}
print(f"test accuracy {100 * acc:.2f}% after epoch {evals[-1]['epoch']} over {sorted(backends)}"
      + (", below the 85% one epoch reaches" if acc < 0.85 else "")
      + ("" if backends == {sys.argv[2]} else f", not {sys.argv[2]}"))
sys.exit(bad)
PY
)"
}

step_example() {
  local runner=() flags=()
  run_example "$1" shm-staged example
}

# Over nccl: each worker a host of its own to NCCL (Note [NCCL ranks sharing a GPU]), which
# is what lets the two share the GPU.
step_example_nccl() {
  local export='export NCCL_HOSTID="dpx-example-$LOCAL_RANK" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1'
  local runner=(bash -c "$export"'; exec "$0" "$@"') flags=(--backend nccl)
  run_example "$1" nccl example_nccl
}

# nccl on 1 rank; 2 ranks sharing the GPU (shm-staged); the same 2 ranks on CPU tensors.
step_bench_allreduce() {
  local b="$bin/bench/dpx-bench" status=0 n dev extra
  for run in "1 cuda" "2 cuda" "2 cpu"; do
    read -r n dev <<<"$run"
    extra=()
    [ "$dev" = cpu ] && extra=(--backend shm)
    limited $(($1 / 3)) bash bench/run_local.sh "$n" --timeout $(($1 / 3)) "$b" allreduce \
      --device "$dev" --max-bytes $((64 << 20)) --seconds 0.1 "${extra[@]}" \
      >"$work/allreduce_${dev}_${n}rank.txt" 2>&1 || { status=$?; detail+="$dev ${n} rank(s): exit $status; "; }
  done
  return "$status"
}

# DDP on the GPU, one round (each configuration starts its processes, ~4.5 s of CUDA start-up
# each, so one round is what the budget holds; a round is one sample, not a median), 300 timed
# steps per configuration but 2 ranks over nccl on the MLP (its 96 MB of gradients cross
# loopback sockets each step): 1 rank with the reduction on (PyTorch's DDP reduces at world
# size 1) against plain LibTorch, with and without gradients as bucket views (which drop the
# copies into the buckets and back: what they cost); 2 DDP ranks over nccl sharing the GPU,
# each a host of its own to NCCL, against 2 independent plain processes sharing it. PyTorch's own cost of DDP at world
# size 1 (run 2026-11-28-3), more rounds, the passthrough and 2 ranks against Python DDP, when a
# call has the time: `dpx-bench ddp --device cuda --configs plain,ddp1r,pyplain,python1 --rounds 3`.
step_bench_ddp() {
  limited "$1" "$bin/bench/dpx-bench" ddp --device cuda --backend auto \
    --configs plain,ddp1r,ddp1r-view,pair,ddp2-nccl --rounds 1 --steps ddp2-nccl:mlp=60 \
    >"$work/ddp.txt" 2>&1 || return $?
  ((dry)) && return 0
  detail="$(grep -E '^- ' "$work/ddp.txt" | tr '\n' ' ')"
}

# DataParallel on one GPU: {cuda:0, cuda:0} against the module alone on cuda:0.
step_bench_dp() {
  limited "$1" "$bin/bench/dpx-bench" dp --device cuda --replicas 2 --rounds 3 --steps 10 \
    >"$work/dp.txt" 2>&1 || return $?
  ((dry)) && return 0
  detail="$(grep -E 'sharing cuda:0' "$work/dp.txt" | tr -s ' ')"
}

# Without a GPU: a step that outlives its budget comes back as 124, with a report of where its
# processes were (naming the one its child forked) and none of them left running.
selftest() {
  work="$(mktemp -d)" current=selftest
  local marker="dpx-selftest-$$" rc=0 left
  limited 10 bash -c "exec -a $marker sleep 300 & sleep 300" >/dev/null 2>&1 || rc=$?
  local f
  left=""
  for f in /proc/[0-9]*/cmdline; do  # argv[0] is the marker only in the processes it started
    [ "$(tr '\0' '\n' 2>/dev/null <"$f" | head -n 1)" = "$marker" ] && left+="${f%/cmdline} "
  done
  grep -q "$marker" "$work/selftest_stuck.txt" 2>/dev/null && ((rc == 124)) && [ -z "$left" ] &&
    echo "gpu_check selftest: PASS" || echo "gpu_check selftest: FAIL (rc $rc, left '$left')"
  rm -rf "$work"
}

dry=0
bin=build-gpu
case "${1:-}" in
  pack) pack; exit ;;
  plan) plan; exit ;;
  dry-run) dry=1; bin=${2:?usage: gpu_check.sh dry-run BUILD_DIR}; plan >/dev/null || exit 1 ;;
  selftest) selftest; exit ;;
  all) ;;
  *) echo "usage: $0 pack | plan | dry-run BUILD_DIR | selftest | all [RESULTS_DIR]" >&2; exit 2 ;;
esac
# DPX_COMMIT first: a GPU machine's copy of the tree may carry a .git that is not this tree's.
commit="${DPX_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
if ((dry)); then
  work="$(mktemp -d)" results="$work/results" PY=python3 gpu="(dry run: no GPU)"
  trap 'rm -rf "$work"' EXIT
else
  results="${2:-${OUT:-$PWD/runs/gpu}}"
  if ! gpu="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)" ||
     [ -z "$gpu" ]; then
    echo "gpu_check: no NVIDIA GPU here (nvidia-smi lists none): run it on a machine with one" >&2
    exit 1
  fi
  [ -d "$deps/prefix/include/gloo" ] ||
    { echo "gpu_check: no $deps (run 'bash scripts/gpu_check.sh pack' where dpx's packages are)" >&2; exit 1; }
  PY="$(python_with_cuda_torch)" || { echo "gpu_check: $PY" >&2; exit 1; }
  export DPX_PYTHON="$PY"
  rm -rf "$work"
fi
mkdir -p "$work" "$results"
"$PY" - "$work/summary.json" "$gpu" "$deadline_s" "$commit" "$dry" <<'PY'
import json, sys
torch_version = cuda = "not imported (dry run)"
if sys.argv[5] == "0":
    import torch
    torch_version, cuda = torch.__version__, torch.version.cuda
json.dump({"gpu": sys.argv[2], "torch": torch_version, "cuda": cuda, "commit": sys.argv[4],
           "deadline_s": int(sys.argv[3]), "steps": []}, open(sys.argv[1], "w"), indent=1)
PY
say "$gpu; commit $commit"
failed=0 built="" current=""
for s in "${steps[@]}"; do
  read -r name budget _ <<<"$s"
  detail=""
  t0=$SECONDS
  current=$name
  if [ "$name" != build ] && [ "$built" != passed ]; then
    status="not run (no build)"
  else
    "step_$name" "$budget"
    rc=$?
    case $rc in
      0) status=passed ;;
      124|137) status="out of time" ;;
      125) status="not run (no time left)" ;;
      *) status="failed (exit $rc)" ;;
    esac
  fi
  [ "$name" = build ] && built=$status
  [ "$status" = passed ] || failed=1
  record "$name" "$status" $((SECONDS - t0)) "$budget" "$detail"
done
say "$( ((failed)) && echo FAILED || echo passed ) in $((SECONDS - start)) s"
cp "$work/summary.txt" "$results/"
exit "$failed"
