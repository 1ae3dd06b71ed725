#!/usr/bin/env bash
# Configures and builds dpx (Ninja, Release, ccache) against one LibTorch:
#   scripts/build.sh          the newest installed (PyTorch 2.15 in .venv, else Debian's 1.13), in build/
#   scripts/build.sh 1.13     Debian's LibTorch 1.13, in build-1.13/ (build/ when it is the only one)
#   scripts/build.sh 2.11 dpx_unit_tests   only the targets named after the version
# Batches of sources compile as one unit (Note [Unity builds], CMakeLists.txt); ccache keeps up
# to 20 GB (CCACHE_MAXSIZE): the three LibTorches' objects and precompiled headers take ~1 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/torch.sh
version="${1:-$(torch_versions | head -n1)}"
targets=("${@:2}")
[ -n "$version" ] || { echo "build: no LibTorch found (scripts/setup.sh installs one)" >&2; exit 1; }
dir="$(torch_dir "$version")"
[ -n "$dir" ] || { echo "build: LibTorch $version is not installed (scripts/setup.sh)" >&2; exit 1; }
out="${DPX_BUILD_DIR:-$(build_dir "$version")}"  # DPX_BUILD_DIR: bench/ci_build_time.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/dpx-ccache}" CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-20G}" CCACHE_BASEDIR="$PWD" CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
# A build folder configured for another LibTorch starts afresh.
if [ -f "$out/CMakeCache.txt" ] && ! grep -qx "Torch_DIR:[A-Z]*=$dir" "$out/CMakeCache.txt"; then
  echo "build: $out/ was configured for another LibTorch; configuring it again for $version"
  rm -rf "$out"
fi
if [ ! -f "$out/build.ninja" ]; then
  log="$(mktemp)"
  cmake -S . -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTorch_DIR="$dir" >"$log" 2>&1 ||
    { cat "$log" >&2; rm -f "$log"; exit 1; }
  mv "$log" "$out/configure.log"
fi
echo "build: LibTorch $version in $out/"
build() { cmake --build "$out" "$@" ${targets[@]:+--target "${targets[@]}"}; }
# A compiler killed for memory or disk prints nothing (CI once failed that way on a precompiled
# header, 700 MB each): say what the machine had, then try once more, one job at a time and without
# ccache, so a real compile error shows again and a starved machine gets the most room.
build -j "$(nproc)" || {
  echo "build: the build failed; free memory and disk at this moment:" >&2
  free -m >&2 || true
  df -h "$out" "$CCACHE_DIR" >&2 || true
  echo "build: building again with one job and no ccache" >&2
  CCACHE_DISABLE=1 build -j 1
}
