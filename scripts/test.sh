#!/usr/bin/env bash
# The whole test suite, against every LibTorch installed (PyTorch 2.15 from PyPI in build/,
# Debian's 1.13 in build-1.13/): setup, build, then every CTest tier. PyTorch 2.11 from PyPI
# (build-2.11/, what the GPU machines run) is built and runs the unit tier, unless DPX_TORCH=2.11
# asks for all of it. Arguments go to CTest, e.g.
#   scripts/test.sh -L unit        DPX_TORCH=1.13 scripts/test.sh -R Launcher
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
source scripts/torch.sh
mapfile -t versions < <(torch_versions)
((${#versions[@]} > 0)) || { echo "test: no LibTorch found (scripts/setup.sh installs one)" >&2; exit 1; }
failed=()
for v in "${versions[@]}"; do
  args=("$@")
  if [ "$v" = 2.11 ] && [ -z "${DPX_TORCH:-}" ] && (($# == 0)); then
    # The unit tier and the programs users run (the GPU check builds the rest on the GPU
    # machine; CI's time goes to the two LibTorch versions that run every tier). The CTest
    # filesystem_imports reads every binary, so it is run here on those built: 2.11's libtorch.so
    # is the one whose std::filesystem crashes (Note [LibTorch's std::filesystem]).
    bash scripts/build.sh "$v" dpx_unit_tests dpx_pickle_fuzz dpxrun fashion_mnist
    out="$(build_dir "$v")"
    python3 scripts/check_filesystem_imports.py "$out"/libdpx.so \
      "$out/tools/dpxrun/dpxrun" "$out/examples/fashion_mnist/fashion_mnist" \
      "$out/tests/dpx_unit_tests" "$out/tests/dpx_pickle_fuzz" || failed+=("$v")
    args=(-L unit -E '^filesystem_imports$')
    echo "test: LibTorch $v ($(build_dir "$v")/): the unit tier (DPX_TORCH=2.11 runs every tier)"
  else
    bash scripts/build.sh "$v"
    echo "test: LibTorch $v ($(build_dir "$v")/)"
  fi
  (cd "$(build_dir "$v")" && ctest --output-on-failure -j "$(nproc)" "${args[@]}") || failed+=("$v")
done
if ((${#failed[@]} > 0)); then
  echo "test: FAILED against LibTorch ${failed[*]}"
  exit 1
fi
echo "test: all tests passed against LibTorch ${versions[*]}"
