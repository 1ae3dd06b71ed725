# Sourced by the scripts: which LibTorch a build uses and where it builds.
#   torch_dir VERSION   prints the Torch CMake folder of LibTorch VERSION (2.15: .venv's PyTorch;
#                       2.11: .venv-2.11's; 1.13: Debian's libtorch-dev), or nothing if it is
#                       not installed
#   build_dir VERSION   build/ for the newest LibTorch installed, build-VERSION/ for the others
#   torch_versions      the LibTorch versions installed, newest first; DPX_TORCH=V keeps one
#   ci_targets VERSION  what scripts/test.sh builds against VERSION (nothing: every target)
#   ci_exclude VERSION  the CTest -E pattern of the tests it leaves out there (nothing: none)
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

# What the suite builds and runs against each LibTorch (docs/ci.md). The newest installed gets
# everything. PyTorch 2.11 (the GPU machines' LibTorch) gets the unit tier and the programs users
# run: a compile check of the whole library, with the tests that need no process group. An older
# LibTorch (Debian's 1.13) gets every test but those of code that is the same whatever the
# LibTorch (kVersionlessTests below). dpx-bench is built for install.consumer_project (the install
# takes every installed target).
ci_targets() {
  [ "$(build_dir "$1")" != build ] || return 0
  case "$1" in
    2.11) echo dpx_unit_tests dpx_pickle_fuzz dpxrun fashion_mnist ;;
    *) echo dpx_unit_tests dpx_multirank_tests dpx_multiproc_tests dpx_isolated_tests \
         dpx_conformance_tests dpx_test_worker dpx_pickle_fuzz dpx_mpi_tests dpxrun \
         fashion_mnist dpx-bench ;;
  esac
}
# Tests whose subject holds no LibTorch-version-dependent code (docs/ci.md): the launcher's agent
# and its flags, dpx's own TCP store protocol, spawning, the stall inspector, the timeline, the
# programs' command lines, Slurm, shared-memory set-up faults, SIGPIPE, the source checks and the
# benchmarks' smoke runs. Tests of c10d (Gloo, TCPStore clients) and with a Python oracle stay.
kVersionlessTests='^(Launcher|LauncherCheck|LauncherMultiNode|LauncherNetns|Schedulers|Spawn|StoreFaults|StoreAddresses|SetupFaults|ShmSetup|StallInspector|Timeline|Cli|Sigpipe)[./]|^(bench_|dpx_bench_|layers|notes$|scripts[.]|example[.]dist_mnist|example[.]fashion_mnist_(elastic|timeline)|cluster[.]ft_coordinator_)'
ci_exclude() {
  [ "$(build_dir "$1")" != build ] || return 0
  case "$1" in
    2.11) echo '^filesystem_imports$' ;;  # scripts/test.sh checks the binaries it built
    *) echo "$kVersionlessTests|^filesystem_imports\$" ;;
  esac
}
