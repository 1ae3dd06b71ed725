// All-reduce and broadcast through the host (shm) and between one leader per host (gloo, or MPI)
// (Note [Hierarchical collectives] in comm/backends/hierarchical/process_group_hierarchical.cpp).
#pragma once

#include <memory>

#include "comm/backends/backend_args.h"
#include "comm/plan/backend.h"
#include "comm/plan/placement.h"

namespace dpx::detail {

// `layout` is the job's. `between`: what the leaders, and the collectives that do not go through
// the hosts, run on: kGloo ("hierarchical") or kMpi ("hierarchical-mpi": MPI_COMM_WORLD's ranks
// must be the store's).
std::shared_ptr<ProcessGroup> make_hierarchical_group(const BackendArgs& args,
                                                      const HostLayout& layout,
                                                      Backend between = Backend::kGloo);

}  // namespace dpx::detail
