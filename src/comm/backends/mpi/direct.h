// Collectives on CUDA tensors handed to a CUDA-aware MPI as they are, once their stream has
// reached the call (Note [Direct collectives] in comm/backends/mpi/direct.cpp). No MPI header
// here: the group only orders calls to `inner`.
#pragma once

#include <memory>

#include "dpx/comm/process_group.h"

namespace dpx::detail::mpi {

// `inner`: an mpi group on `options.device` (it hands MPI the device's pointers).
std::shared_ptr<ProcessGroup> make_direct_group(std::shared_ptr<ProcessGroup> inner,
                                                ProcessGroup::Options options);

}  // namespace dpx::detail::mpi
