#!/usr/bin/env bash
# The GPU checks of issue #14 item 9, for a session that has a GPU machine (the device tool):
# build dpx there against that machine's own torch and run the GPU tests.
#
#   bash scripts/gpu_check.sh pack    here: copies what the GPU image may lack (GoogleTest's
#                                     sources, CLI11's and nlohmann_json's headers and CMake
#                                     files, Fashion-MNIST: 35 MB in all) into build-gpu-deps/
#                                     (ignored by git: carry it)
#   bash scripts/gpu_check.sh build   there: builds build-gpu/ (DPX_CUDA=ON), ~5 min on 16 cores
#   bash scripts/gpu_check.sh test    there: runs the GPU tests; logs go to $OUT (or runs/gpu/)
#   bash scripts/gpu_check.sh bench   there: all-reduce (nccl, staged) and DDP benchmarks
#   bash scripts/gpu_check.sh all     there: build, test, bench
#
# One device call, e.g.:  run(command="bash scripts/gpu_check.sh all", carry=["build-gpu-deps"])
# A device command may run 10 minutes: if that is tight, call `build`, then `test; bench` (the
# machine keeps build-gpu/ between calls while it stays warm). Nothing here downloads anything.
set -euo pipefail
cd "$(dirname "$0")/.."
deps="$PWD/build-gpu-deps"
out="${OUT:-$PWD/runs/gpu}"

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

torch_prefix() { python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'; }

build() {
  [ -d "$deps/prefix" ] || { echo "gpu_check: no $deps (run 'pack' here and carry it)" >&2; exit 1; }
  if ! find "$deps/prefix" -name 'GTestConfig.cmake' | grep -q .; then
    cmake -S "$deps/googletest" -B "$deps/gtest-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_INSTALL_PREFIX="$deps/prefix" >/dev/null
    cmake --build "$deps/gtest-build" --target install >/dev/null
  fi
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
  mkdir -p build-gpu
  local zlib=()
  [ -f /usr/include/zlib.h ] || zlib=(-DZLIB_ROOT="$deps/zlib")
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDPX_CUDA=ON "${zlib[@]}" \
    -DCMAKE_PREFIX_PATH="$(torch_prefix);$deps/prefix" -DDPX_PYTHON="$(command -v python3)" \
    >build-gpu/configure.log 2>&1 || { cat build-gpu/configure.log; exit 1; }
  grep 'dpx:' build-gpu/configure.log
  cmake --build build-gpu -j "$(nproc)" --target dpx_unit_tests dpx_multirank_tests \
    dpx_multiproc_tests fashion_mnist dpxrun dpx-bench
}

test_gpu() {
  mkdir -p "$out"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/device.txt"
  local status=0
  # The tests of issue #14: every one of them skips without a GPU, so here they must run.
  build-gpu/tests/dpx_unit_tests --gtest_filter='Cuda*:DeviceBackendChoice*:NcclErrors*:DataParallelCuda*:CheckpointTest.MapLocation*' \
    >"$out/unit.txt" 2>&1 || status=1
  build-gpu/tests/dpx_multirank_tests --gtest_filter='Staged*:NcclGroup*' \
    >"$out/multirank.txt" 2>&1 || status=1
  build-gpu/tests/dpx_multiproc_tests --gtest_filter='DdpCuda*:Cli.Example*' \
    >"$out/multiproc.txt" 2>&1 || status=1
  # The example, one GPU per worker (2 workers share the GPU on a one-GPU machine: staged).
  local run_dir
  run_dir="$(mktemp -d)"
  build-gpu/tools/dpxrun/dpxrun --standalone --nproc-per-node 2 \
    build-gpu/examples/fashion_mnist/fashion_mnist --device cuda --epochs 1 --max-steps 200 \
    --data-dir "$deps/fashion-mnist" --checkpoint-dir "$run_dir/ckpt" \
    --metrics-file "$run_dir/metrics.jsonl" >"$out/example.txt" 2>&1 || status=1
  cp "$run_dir/metrics.jsonl" "$out/example_metrics.jsonl" 2>/dev/null || true
  rm -rf "$run_dir"
  grep -hE '^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^\[  SKIPPED \]' "$out"/*.txt || true
  tail -n 3 "$out/example.txt"
  return $status
}

# The numbers docs/performance.md asks for, each against a baseline of the same run.
bench_gpu() {
  mkdir -p "$out"
  local b=build-gpu/bench/dpx-bench status=0
  # nccl on 1 rank; 2 ranks sharing the GPU (shm-staged); the same 2 ranks on CPU tensors.
  bash bench/run_local.sh 1 --timeout 300 "$b" allreduce --device cuda \
    >"$out/allreduce_cuda_1rank.txt" 2>&1 || status=1
  bash bench/run_local.sh 2 --timeout 300 "$b" allreduce --device cuda \
    >"$out/allreduce_cuda_2ranks.txt" 2>&1 || status=1
  bash bench/run_local.sh 2 --timeout 300 "$b" allreduce --device cpu --backend shm \
    >"$out/allreduce_cpu_2ranks.txt" 2>&1 || status=1
  # DDP: 1 rank against plain LibTorch, 2 ranks against Python DDP, on the GPU.
  "$b" ddp --device cuda --backend auto --configs plain,ddp1,ddp2,python --rounds 5 \
    --cnn-steps 50 --mlp-steps 20 >"$out/ddp.txt" 2>&1 || status=1
  tail -n 25 "$out/ddp.txt"
  return $status
}

case "${1:-}" in
  pack) pack ;;
  build) build ;;
  test) test_gpu ;;
  bench) bench_gpu ;;
  all)
    build
    failed=0
    test_gpu || failed=1
    bench_gpu || failed=1
    exit $failed
    ;;
  *) echo "usage: $0 pack|build|test|bench|all" >&2; exit 2 ;;
esac
