// The factories of the built-in backends, one per folder under src/comm/.
#pragma once

#include <memory>
#include <string>

#include "dpx/comm/process_group.h"
#include "dpx/comm/store.h"

namespace dpx::detail {

struct BackendArgs {
  std::shared_ptr<Store> store;  // already prefixed for this group
  int rank = 0;
  int size = 1;
  ProcessGroup::Options options;
};

std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs& args);
std::shared_ptr<ProcessGroup> make_shm_group(const BackendArgs& args);

// The nccl backend (src/comm/nccl/): one CUDA device per rank; a clear error without CUDA.
std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs& args);
// Collectives on `options.device` tensors over `host`, a CPU group, through host buffers
// (Note [Staged collectives] in comm/staged.cpp).
std::shared_ptr<ProcessGroup> make_staged_group(std::shared_ptr<ProcessGroup> host,
                                                ProcessGroup::Options options);
// A group on a device (args.options.device not the CPU), or any "nccl" group: nccl, or shm or
// gloo staged; `backend` is what pick_backend() gave (auto, shm, gloo, nccl).
std::shared_ptr<ProcessGroup> make_device_group(const std::string& backend,
                                                const BackendArgs& args);

// "hostname/boot id": equal for two processes on one machine (and one kernel).
std::string host_identity();

// Whether every rank runs on this host (same hostname and boot id), agreed through the store.
bool all_ranks_on_one_host(const BackendArgs& args);

}  // namespace dpx::detail
