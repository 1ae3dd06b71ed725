#!/usr/bin/env bash
# The whole test suite, against every LibTorch installed: setup, build, then the CTest tiers.
# PyTorch 2.15 from PyPI (build/) runs every test; PyTorch 2.11 (build-2.11/, what the GPU
# machines run) builds the library and runs the unit tier; Debian's 1.13 (build-1.13/) runs every
# test of code that differs between LibTorch versions (scripts/torch.sh's ci_targets and
# ci_exclude; docs/ci.md). DPX_TORCH=V or CTest arguments build and run all of it, e.g.
#   scripts/test.sh -L unit        DPX_TORCH=1.13 scripts/test.sh -R Launcher
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
source scripts/torch.sh
mapfile -t versions < <(torch_versions)
((${#versions[@]} > 0)) || { echo "test: no LibTorch found (scripts/setup.sh installs one)" >&2; exit 1; }
failed=()
for v in "${versions[@]}"; do
  out="$(build_dir "$v")"
  read -ra targets <<<"$(ci_targets "$v")"
  args=("$@")
  if [ -z "${DPX_TORCH:-}" ] && (($# == 0)); then
    exclude="$(ci_exclude "$v")"
    [ -z "$exclude" ] || args=(-E "$exclude")
    [ "$v" != 2.11 ] || args+=(-L unit)
  else
    targets=()  # DPX_TORCH=V or CTest arguments: every target, every test asked for
  fi
  bash scripts/build.sh "$v" ${targets[@]+"${targets[@]}"}
  if ((${#targets[@]} > 0)); then
    # The CTest filesystem_imports reads every binary, so a partial build runs its check here, on
    # the binaries it built: 2.11's libtorch.so is the one whose std::filesystem crashes
    # (Note [LibTorch's std::filesystem]).
    mapfile -t binaries < <(for t in "${targets[@]}"; do
      find "$out" -type f -executable -name "$t"; done)
    python3 scripts/check_filesystem_imports.py "$out"/libdpx.so "${binaries[@]}" || failed+=("$v")
  fi
  echo "test: LibTorch $v ($out/)${targets[*]:+: built ${targets[*]}; the tests CI runs here (docs/ci.md)}"
  (cd "$out" && ctest --output-on-failure -j "$(nproc)" ${args[@]+"${args[@]}"}) || failed+=("$v")
done
if ((${#failed[@]} > 0)); then
  echo "test: FAILED against LibTorch ${failed[*]}"
  exit 1
fi
echo "test: all tests passed against LibTorch ${versions[*]}"
