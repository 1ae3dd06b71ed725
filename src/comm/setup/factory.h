// Making a group of the backend asked for: the one place a Backend becomes a ProcessGroup, and
// the factories of the backends, one per folder under src/comm/.
#pragma once

#include <memory>

#include "comm/setup/backend.h"
#include "comm/setup/placement.h"
#include "dpx/comm/process_group.h"
#include "dpx/store/store.h"

namespace dpx::detail {

struct BackendArgs {
  std::shared_ptr<Store> store;  // already prefixed for this group
  int rank = 0;
  int size = 1;
  ProcessGroup::Options options;
};

// 1. `asked` (auto included) on the CPU or a CUDA device; nccl on the CPU is a clear error.
//    Every rank has the world size this one has (Note [Members] in comm/setup/members.h).
// 2. The placement, in one store round, when auto or hierarchical needs it.
// 3. The choice (Note [Backend choice] in comm/setup/choose.h), then the backend's factory;
//    a host backend on a device is staged through host memory.
std::shared_ptr<ProcessGroup> make_group(Backend asked, const BackendArgs& args);

std::shared_ptr<ProcessGroup> make_gloo_group(const BackendArgs& args);
std::shared_ptr<ProcessGroup> make_shm_group(const BackendArgs& args);
// The nccl backend (src/comm/backends/nccl/): one CUDA device per rank; a clear error without CUDA.
std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs& args);
// All-reduce and broadcast through the host (shm) and between one leader per host (gloo)
// (Note [Hierarchical collectives] in
// comm/backends/hierarchical/process_group_hierarchical.cpp); `layout` is the job's.
std::shared_ptr<ProcessGroup> make_hierarchical_group(const BackendArgs& args,
                                                      const HostLayout& layout);
// Collectives on `options.device` tensors over `host`, a CPU group, through host buffers
// (Note [Staged collectives] in comm/backends/staged/process_group_staged.cpp).
std::shared_ptr<ProcessGroup> make_staged_group(std::shared_ptr<ProcessGroup> host,
                                                ProcessGroup::Options options);

}  // namespace dpx::detail
