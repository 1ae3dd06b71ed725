# Sourced by the scripts: which LibTorch a build uses and where it builds.
#   torch_dir VERSION   prints the Torch CMake folder of LibTorch VERSION (2.15: .venv's PyTorch;
#                       2.11: .venv-2.11's; 1.13: Debian's libtorch-dev), or nothing if it is
#                       not installed
#   build_dir VERSION   build/ for the newest LibTorch installed, build-VERSION/ for the others
#   torch_versions      the LibTorch versions installed, newest first; DPX_TORCH=V keeps one
# The Torch CMake folder of the PyTorch VERSION in the virtual environment VENV, if it is there.
pip_torch_dir() {
  [ -x "$1/bin/python" ] &&
    "$1/bin/python" -c "import torch, sys, os
sys.exit(1) if not torch.__version__.startswith('$2.') else print(os.path.join(torch.utils.cmake_prefix_path, 'Torch'))" \
      2>/dev/null || true
}
torch_dir() {
  case "$1" in
    2.15) pip_torch_dir .venv 2.15 ;;
    2.11) pip_torch_dir .venv-2.11 2.11 ;;
    1.13) [ -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake ] &&
            echo /usr/lib/x86_64-linux-gnu/cmake/Torch || true ;;
    *) echo "unknown LibTorch version '$1': dpx's scripts know 2.15, 2.11 and 1.13" >&2; return 1 ;;
  esac
}
installed_versions() {
  local v
  for v in 2.15 2.11 1.13; do
    [ -n "$(torch_dir "$v")" ] && echo "$v"
  done
  return 0
}
torch_versions() { installed_versions | grep -x "${DPX_TORCH:-.*}" || true; }
build_dir() {
  if [ "$1" = "$(installed_versions | head -n1)" ]; then echo build; else echo "build-$1"; fi
}
