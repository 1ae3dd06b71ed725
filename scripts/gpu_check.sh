#!/usr/bin/env bash
# Every GPU check of dpx, for a machine with one or more NVIDIA GPUs, PyTorch with CUDA, nvcc,
# CMake and Ninja, and no package registry: it builds dpx there against that machine's torch
# and runs the GPU tests, the example and the GPU benchmarks.
#
#   bash scripts/gpu_check.sh pack    on a Debian machine with dpx's packages (scripts/setup.sh):
#                                     copies what a GPU image may lack (GoogleTest's sources,
#                                     CLI11's and nlohmann_json's headers and CMake files,
#                                     zlib's headers, Fashion-MNIST: 35 MB) into build-gpu-deps/
#                                     (ignored by git); take that folder along to the GPU machine
#   bash scripts/gpu_check.sh build   on the GPU machine: builds build-gpu/ (DPX_CUDA=ON), about
#                                     5 min on 16 cores
#   bash scripts/gpu_check.sh test    the GPU tests (gtest XML) and the example, whose test
#                                     accuracy must reach 85% in one epoch
#   bash scripts/gpu_check.sh bench   all-reduce (nccl, staged) and DDP benchmarks
#   bash scripts/gpu_check.sh all     build, test, bench in one go (where one command may take
#                                     longer than 10 minutes: set GPU_CHECK_SECONDS=1800)
#
# Two commands of at most 10 minutes each cover everything: `build`, then `test bench` (the
# arguments run in order; build-gpu/ stays where it is between the two). One invocation keeps
# within GPU_CHECK_SECONDS (default 560): every test binary, example and benchmark runs under
# `timeout` with what is left of it, and what no longer fits is reported as not run. Results:
# $OUT (or runs/gpu/) gets summary.txt and gpu_check.tar.gz (every log and gtest XML file).
# Python: DPX_PYTHON, or the first python3/python on PATH whose torch has CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
deps="$PWD/build-gpu-deps"
out="${OUT:-$PWD/runs/gpu}"
work="$PWD/build-gpu/check"  # logs and XML before they are bundled into $out
deadline=$((SECONDS + ${GPU_CHECK_SECONDS:-560}))

say() { echo "gpu_check: $*" | tee -a "$work/summary.txt"; }

# Runs a command under `timeout`: at most LIMIT seconds, and never past the deadline. Returns
# 124 when it was killed for time, 125 when no time was left to start it.
limited() {
  local limit=$1
  shift
  local left=$((deadline - SECONDS - 10))
  ((left < limit)) && limit=$left
  ((limit >= 15)) || return 125
  timeout --kill-after=5 "$limit" "$@"
}

pack() {
  rm -rf "$deps"
  mkdir -p "$deps/prefix/include" "$deps/prefix/share/cmake"
  cp -r /usr/src/googletest "$deps/googletest"
  cp -r /usr/include/CLI /usr/include/nlohmann "$deps/prefix/include/"
  cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$deps/prefix/share/cmake/"
  cp -r /usr/share/datasets/fashion-mnist "$deps/fashion-mnist"
  # zlib's headers, for an image with only the runtime library (its libz.so.1 is used there).
  mkdir -p "$deps/zlib/include" "$deps/zlib/lib"
  cp /usr/include/zlib.h /usr/include/zconf.h "$deps/zlib/include/"
  cp -L /usr/lib/x86_64-linux-gnu/libz.so "$deps/zlib/lib/libz.so"
  du -sh "$deps"
}

# The Python whose torch dpx builds against and whose PyTorch the oracle tests run.
python_with_cuda_torch() {
  if [ -n "${DPX_PYTHON:-}" ]; then
    "$DPX_PYTHON" -c 'import torch' 2>/dev/null ||
      { echo "gpu_check: DPX_PYTHON=$DPX_PYTHON does not import torch" >&2; return 1; }
    echo "$DPX_PYTHON"
    return 0
  fi
  local p
  for p in $(type -ap python3 python) /usr/bin/python3; do
    if "$p" -c 'import sys, torch; sys.exit(not torch.backends.cuda.is_built())' 2>/dev/null; then
      echo "$p"
      return 0
    fi
  done
  echo "gpu_check: no python3 on PATH imports a torch built with CUDA; set DPX_PYTHON" >&2
  return 1
}

build() {
  [ -d "$deps/prefix" ] || { echo "gpu_check: no $deps (run 'pack' where dpx's packages are)" >&2; exit 1; }
  local py
  py="$(python_with_cuda_torch)"
  if ! find "$deps/prefix" -name 'GTestConfig.cmake' | grep -q .; then
    cmake -S "$deps/googletest" -B "$deps/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$deps/prefix" >/dev/null
    cmake --build "$deps/gtest-build" --target install >/dev/null
  fi
  "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  mkdir -p build-gpu
  local zlib=()
  [ -f /usr/include/zlib.h ] || zlib=(-DZLIB_ROOT="$deps/zlib")
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPX_CUDA=ON "${zlib[@]}" \
    -DCMAKE_PREFIX_PATH="$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)');$deps/prefix" \
    -DDPX_PYTHON="$py" >build-gpu/configure.log 2>&1 || { cat build-gpu/configure.log; exit 1; }
  grep 'dpx:' build-gpu/configure.log
  cmake --build build-gpu -j "$(nproc)" --target dpx_unit_tests dpx_multirank_tests \
    dpx_multiproc_tests fashion_mnist dpxrun dpx-bench
}

# One test binary with a gtest filter, its results as XML. Fails when the binary fails, runs
# out of time, or any pattern of the filter matches no test (a renamed test must not drop out).
gtest() {
  local name=$1 filter=$2 limit=$3
  local bin="build-gpu/tests/dpx_${name}_tests" status=0 pattern count
  for pattern in ${filter//:/ }; do
    count=$("$bin" --gtest_list_tests --gtest_filter="$pattern" | grep -c '^  ' || true)
    if [ "$count" = 0 ]; then
      say "the pattern '$pattern' matches no $name test"
      status=1
    fi
  done
  limited "$limit" "$bin" --gtest_filter="$filter" --gtest_output="xml:$work/$name.xml" \
    >"$work/$name.txt" 2>&1 || status=$?
  case "$status" in
    0|1) ;;
    124|137) say "$name tests ran out of time and were killed" ;;
    125) say "$name tests not run: no time left" ;;
    *) say "$name tests failed with exit $status" ;;
  esac
  grep -hE '^\[ +(FAILED|SKIPPED) +\] .*\)$' "$work/$name.txt" 2>/dev/null | tee -a "$work/summary.txt" || true
  say "$name: $(grep -c '^\[       OK \]' "$work/$name.txt" 2>/dev/null || true) passed, exit $status"
  return $((status != 0))
}

# The example on every GPU (workers share them when there are fewer): one epoch, and the test
# accuracy it reaches must be at least 85% (the CPU build reaches 88-89% after one epoch).
example_gpu() {
  local run_dir status=0
  run_dir="$(mktemp -d)"
  limited 300 build-gpu/tools/dpxrun/dpxrun --standalone --nproc-per-node 2 \
    build-gpu/examples/fashion_mnist/fashion_mnist --device cuda --epochs 1 \
    --data-dir "$deps/fashion-mnist" --checkpoint-dir "$run_dir/ckpt" \
    --metrics-file "$run_dir/metrics.jsonl" >"$work/example.txt" 2>&1 || status=$?
  cp "$run_dir/metrics.jsonl" "$work/example_metrics.jsonl" 2>/dev/null || true
  rm -rf "$run_dir"
  tail -n 3 "$work/example.txt" | tee -a "$work/summary.txt"
  case "$status" in
    0) ;;
    124|137) say "the example ran out of time and was killed"; return 1 ;;
    125) say "the example not run: no time left"; return 1 ;;
    *) say "the example failed with exit $status ($work/example.txt)"; return 1 ;;
  esac
  "$PY" - "$work/example_metrics.jsonl" <<'PY' | tee -a "$work/summary.txt"
import json, sys
evals = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "eval"]
if not evals:
    print("gpu_check: the example wrote no test accuracy"); sys.exit(1)
acc = evals[-1]["test_accuracy"]
print(f"gpu_check: example test accuracy {100 * acc:.2f}% after epoch {evals[-1]['epoch']}")
if acc < 0.85:
    print("gpu_check: below the 85% an epoch reaches"); sys.exit(1)
PY
  return "${PIPESTATUS[0]}"
}

test_gpu() {
  [ -x build-gpu/tests/dpx_unit_tests ] || { say "build-gpu/ is not built (run 'build')"; return 1; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee -a "$work/summary.txt"
  local status=0
  # Every test that needs a GPU has Cuda or Nccl in its suite's name, or is named here (each
  # skips without a GPU elsewhere, so here it must run); Cli.Example* runs the example's CLI.
  gtest unit '*Cuda*:*Nccl*:BackendChoice.AGpu*:CheckpointTest.MapLocation*' 90 || status=1
  gtest multirank '*Cuda*:*Nccl*:Staged*' 90 || status=1
  gtest multiproc '*Cuda*:*Nccl*:Cli.Example*' 180 || status=1
  example_gpu || status=1
  return $status
}

# The numbers docs/performance.md asks for, each against a baseline of the same run.
bench_gpu() {
  local b=build-gpu/bench/dpx-bench status=0 name
  # nccl on 1 rank; 2 ranks sharing the GPU (shm-staged); the same 2 ranks on CPU tensors.
  for name in "1 cuda" "2 cuda" "2 cpu"; do
    set -- $name
    local extra=()
    [ "$2" = cpu ] && extra=(--backend shm)
    limited 60 bash bench/run_local.sh "$1" --timeout 60 "$b" allreduce --device "$2" "${extra[@]}" \
      >"$work/allreduce_$2_$1rank.txt" 2>&1 || { say "allreduce on $2, $1 rank(s): exit $?"; status=1; }
  done
  # DDP: 1 rank against plain LibTorch, 2 ranks against Python DDP, on the GPU.
  limited 240 "$b" ddp --device cuda --backend auto --configs plain,ddp1,ddp2,python --rounds 5 \
    --cnn-steps 50 --mlp-steps 20 >"$work/ddp.txt" 2>&1 || { say "ddp bench: exit $?"; status=1; }
  tail -n 25 "$work/ddp.txt" | tee -a "$work/summary.txt"
  return $status
}

(($# > 0)) || { echo "usage: $0 pack|build|test|bench|all ..." >&2; exit 2; }
for step in "$@"; do
  case "$step" in pack|build|test|bench|all) ;; *) echo "usage: $0 pack|build|test|bench|all ..." >&2; exit 2 ;; esac
done
failed=0
ran_checks=0
for step in "$@"; do
  case "$step" in
    pack) pack; continue ;;
    build) build; continue ;;
  esac
  if ((ran_checks == 0)); then
    rm -rf "$work"
    mkdir -p "$work" "$out"
    PY="$(python_with_cuda_torch)"
    export DPX_PYTHON="$PY"
    ran_checks=1
  fi
  case "$step" in
    test) test_gpu || failed=1 ;;
    bench) bench_gpu || failed=1 ;;
    all) build; test_gpu || failed=1; bench_gpu || failed=1 ;;
  esac
done
if ((ran_checks)); then
  say "$( ((failed)) && echo FAILED || echo passed ) in $SECONDS s"
  cp "$work/summary.txt" "$out/summary.txt"
  tar czf "$out/gpu_check.tar.gz" -C "$work" .
fi
exit $failed
