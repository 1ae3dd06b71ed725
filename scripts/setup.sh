#!/usr/bin/env bash
# Installs what dpx needs. Idempotent: when everything is present it only checks.
#  1. Debian packages: the build tools, LibTorch 1.13 (libtorch-dev, with python3-torch as its
#     oracle), the data set, the MPI baseline, gnuplot.
#  2. LibTorch 2.15 from PyPI, and with --tests 2.11 too, into the project's virtual
#     environments .venv/ and .venv-2.11/ (ignored by git, reused when present): `torch` with the libraries it loads,
#     but not triton (torch.compile's GPU kernel compiler, which neither C++ nor Python DDP
#     uses): 2.6 GB downloaded for each. Where PyPI cannot be reached it says so in one line,
#     and dpx builds against what is there (Debian's 1.13 at least).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build ccache g++ git
  libtorch-dev libgloo-dev libopenblas0-pthread zlib1g-dev
  libgtest-dev libgmock-dev
  python3-torch               # LibTorch 1.13's oracle and baseline (Python DDP, torchrun)
  python3-numpy               # PyTorch's PowerSGD hook, an oracle of the tests
  python3-venv                # .venv for PyTorch 2.15
  dataset-fashion-mnist       # the main job's data
  libopenmpi-dev openmpi-bin  # MPI_Allreduce baseline in the benchmarks
  gnuplot-nox                 # loss/accuracy curves
  iproute2                    # network-namespace tests of dpxrun
  libcli11-dev                # command lines of dpxrun, dpx-bench and the example
  nlohmann-json3-dev          # error files, metrics and benchmark output
  slurm-wlm                   # srun/sbatch tests: private one- and two-node clusters, no munge; pmix plugin
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
    sudo=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# PyTorch from PyPI, one virtual environment per version: 2.15 in .venv (the newest, what
# build/ uses, and the tests' main oracle) and, for the tests (`setup.sh --tests`, as
# scripts/test.sh calls it), 2.11 in .venv-2.11 (what the GPU machines have: built and
# unit-tested so that a GPU session meets no compile error). DPX_TORCH=V keeps one LibTorch
# (1.13: Debian's alone, nothing from PyPI).
has_torch() {  # VENV VERSION
  "$1/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$2.'))" \
    >/dev/null 2>&1
}
# numpy: not a torch requirement, but PyTorch's PowerSGD hook (an oracle of the tests) needs it;
# safetensors: the oracle of the safetensors tests (tests/python/state_dict_oracle.py).
ensure_module() {  # VENV MODULE WHAT-SKIPS
  "$1/bin/python" -c "import $2" >/dev/null 2>&1 ||
    "$1/bin/python" -m pip install -q "$2" >>"$1/pip.log" 2>&1 ||
    echo "setup: $2 did not install into $1 (see $1/pip.log): $3 will skip"
}
install_torch() {  # VENV VERSION
  local venv=$1 version=$2 log="$1/pip.log"
  if ! has_torch "$venv" "$version"; then
    echo "setup: installing PyTorch $version from PyPI into $venv (about 2.6 GB to download, 4.4 GB on disk)"
    [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
    if ! "$venv/bin/python" -m pip install -q --no-deps "torch==$version.*" >"$log" 2>&1; then
      echo "setup: PyPI unreachable (see $log): no LibTorch $version"
      return 0
    fi
    # torch's own requirements for this platform, less triton (torch.compile's GPU compiler).
    local deps
    mapfile -t deps < <("$venv/bin/python" - <<'PY'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
for r in requires("torch") or []:
    req = Requirement(r)
    if req.name == "triton" or (req.marker and not req.marker.evaluate({"extra": ""})):
        continue
    req.marker = None
    print(req)
PY
)
    if ! "$venv/bin/python" -m pip install -q "${deps[@]}" >>"$log" 2>&1; then
      echo "setup: PyPI unreachable (see $log): no LibTorch $version"
      return 0
    fi
    has_torch "$venv" "$version" ||
      { echo "setup: PyTorch $version in $venv does not import (see $log)" >&2; exit 1; }
  fi
  ensure_module "$venv" numpy "the PowerSGD oracle test"
  ensure_module "$venv" safetensors "the safetensors oracle tests"
}
case "${DPX_TORCH:-}" in
  "") install_torch .venv 2.15; [ "${1:-}" != --tests ] || install_torch .venv-2.11 2.11 ;;
  2.15) install_torch .venv 2.15 ;;
  2.11) install_torch .venv-2.11 2.11 ;;
esac
