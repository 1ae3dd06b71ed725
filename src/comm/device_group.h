// How a group on a device picks its transport, apart from stores and devices so that a machine
// without a GPU tests it.
#pragma once

#include <functional>
#include <string>

namespace dpx::detail {

// Where the ranks of a group are, as far as the choice of transport cares.
struct Placement {
  bool one_host = true;        // every rank on this host
  bool device_shared = false;  // two ranks of one host on the same device
};

// "nccl", "shm" or "gloo" (the last two staged through host memory) for a group on a CUDA
// device. `asked` is auto, shm, gloo or nccl; `placement` is only called for auto.
// Note [Device backend choice]: auto takes nccl when dpx has it and no two ranks share a GPU
// (NCCL refuses that); else shm on one host, gloo across hosts, as CPU groups do.
std::string choose_device_backend(const std::string& asked, bool nccl_built,
                                  const std::function<Placement()>& placement);

}  // namespace dpx::detail
