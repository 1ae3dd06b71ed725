#!/usr/bin/env bash
# Installs what dpx needs. Idempotent: when everything is present it only checks.
#  1. Debian packages: the build tools, LibTorch 1.13 (libtorch-dev, with python3-torch as its
#     oracle), the data set, the MPI baseline, gnuplot.
#  2. LibTorch 2.15 from PyPI, into the project's virtual environment .venv/ (ignored by git,
#     reused when present): `torch` with the libraries it loads, but not triton (torch.compile's
#     GPU kernel compiler, which neither C++ nor Python DDP uses): 2.6 GB downloaded.
#     Where PyPI cannot be reached it says so in one line, and dpx builds against 1.13 alone.
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
  slurm-wlm                   # srun/sbatch tests: a private one-node cluster, no munge
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

# PyTorch 2.15 in .venv. DPX_TORCH=1.13 skips it (Debian's LibTorch only).
torch_version="2.15"
venv=.venv
has_torch() {
  "$venv/bin/python" -c "import torch, sys; sys.exit(not torch.__version__.startswith('$torch_version.'))" \
    >/dev/null 2>&1
}
# safetensors: the oracle of the safetensors tests (tests/python/state_dict_oracle.py).
ensure_safetensors() {
  "$venv/bin/python" -c "import safetensors" >/dev/null 2>&1 ||
    "$venv/bin/python" -m pip install -q safetensors >>"$venv/pip.log" 2>&1 ||
    echo "setup: safetensors did not install into $venv (see $venv/pip.log): the safetensors oracle tests will skip"
}
# numpy: not a torch requirement, but PyTorch's PowerSGD hook (an oracle of the tests) needs it.
ensure_numpy() {
  "$venv/bin/python" -c "import numpy" >/dev/null 2>&1 ||
    "$venv/bin/python" -m pip install -q numpy >>"$venv/pip.log" 2>&1 ||
    echo "setup: numpy did not install into $venv (see $venv/pip.log): the PowerSGD oracle test will skip"
}
if [ "${DPX_TORCH:-}" = "1.13" ]; then
  exit 0
fi
if has_torch; then
  ensure_numpy
  ensure_safetensors
  exit 0
fi
echo "setup: installing PyTorch $torch_version from PyPI into $venv (about 2.6 GB to download, 4.4 GB on disk)"
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
log="$venv/pip.log"
if ! "$venv/bin/python" -m pip install -q --no-deps "torch==$torch_version.*" >"$log" 2>&1; then
  echo "setup: PyPI unreachable (see $log): building against Debian's LibTorch 1.13 only"
  exit 0
fi
# torch's own requirements for this platform, less triton.
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
  echo "setup: PyPI unreachable (see $log): building against Debian's LibTorch 1.13 only"
  exit 0
fi
has_torch || { echo "setup: PyTorch $torch_version in $venv does not import (see $log)" >&2; exit 1; }
ensure_numpy
ensure_safetensors
