#!/usr/bin/env bash
# configure.sh SOURCE_DIR SCRATCH_DIR TORCH_DIR DPX_CUDA: configures dpx (tests off) and says
# whether that failed; the ctest entry matches the message. The scratch folder is removed.
set -u
src="$1" out="$2" torch_dir="$3" value="$4"
rm -rf "$out"
trap 'rm -rf "$out"' EXIT
if cmake -S "$src" -B "$out" -G Ninja -DTorch_DIR="$torch_dir" -DDPX_BUILD_TESTS=OFF \
     -DDPX_CUDA="$value" >"$out.log" 2>&1; then
  echo "configure succeeded"
else
  echo "configure failed:"
fi
tr '\n' ' ' <"$out.log" | tr -s ' '  # one line: CMake wraps its messages
rm -f "$out.log"
