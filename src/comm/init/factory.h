// Making a group of the backend asked for: the one place a Backend becomes a ProcessGroup. Each
// backend's own factory (make_<backend>_group) is declared in its folder under
// src/comm/backends/.
#pragma once

#include <memory>

#include "comm/backends/backend_args.h"
#include "comm/plan/backend.h"

namespace dpx::detail {

// 0. mpi is made at once: MPI knows its ranks, and the store may be null.
// 1. `asked` (auto included) on the CPU or a CUDA device; nccl on the CPU is a clear error.
//    Every rank has the world size this one has (Note [Members] in comm/plan/members.h).
// 2. The placement, in one store round, when auto or hierarchical needs it.
// 3. The choice (Note [Backend choice] in comm/plan/choose.h), then the backend's factory;
//    a host backend on a device is staged through host memory.
std::shared_ptr<ProcessGroup> make_group(Backend asked, const BackendArgs& args);

}  // namespace dpx::detail
