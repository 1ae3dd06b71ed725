// All-reduce and broadcast through the host (shm) and between one leader per host (gloo)
// (Note [Hierarchical collectives] in comm/backends/hierarchical/process_group_hierarchical.cpp).
#pragma once

#include <memory>

#include "comm/backends/backend_args.h"
#include "comm/plan/placement.h"

namespace dpx::detail {

// `layout` is the job's.
std::shared_ptr<ProcessGroup> make_hierarchical_group(const BackendArgs& args,
                                                      const HostLayout& layout);

}  // namespace dpx::detail
