#!/usr/bin/env bash
# Installs every Debian package dpx needs. Idempotent: when all are present it only checks.
set -euo pipefail

packages=(
  cmake ninja-build ccache g++ git
  libtorch-dev libgloo-dev libopenblas0-pthread zlib1g-dev
  libgtest-dev libgmock-dev
  python3-torch               # test oracle and benchmark baseline (Python DDP, torchrun)
  dataset-fashion-mnist       # the main job's data
  libopenmpi-dev openmpi-bin  # MPI_Allreduce baseline in the benchmarks
  gnuplot-nox                 # loss/accuracy curves
  iproute2                    # network-namespace tests of dpxrun
  libcli11-dev                # command lines of dpxrun, dpx-bench and the example
  nlohmann-json3-dev          # error files, metrics and benchmark output
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
