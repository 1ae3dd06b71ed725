// The mpi backend: MPI's non-blocking collectives behind dpx's interface, set up from
// MPI_COMM_WORLD without a store (docs/backends.md, "The mpi backend"). Where dpx was built
// without MPI (cmake/dpx_mpi.cmake), both calls are a clear error that names what to install.
#pragma once

#include <memory>
#include <string>

#include "comm/backends/backend_args.h"

namespace dpx::detail {

struct MpiWorld {
  int rank = 0;
  int size = 1;
};

// MPI_COMM_WORLD's rank and size, initialising MPI on the first call (Note [MPI thread] in
// comm/backends/mpi/runtime.h). A `rank` or `size` of -1 is not checked; any other must be
// MPI's, else a clear error (RANK/WORLD_SIZE that disagree with the MPI launcher).
MpiWorld mpi_world(int rank = -1, int size = -1);

// A group of every rank of MPI_COMM_WORLD (args.rank and args.size must be MPI's), or of
// args.members only, made by them alone (Note [MPI sub-groups] in comm/backends/mpi/subgroup.h).
// The store may be null; with one, the ranks also check through it that they all asked for mpi.
std::shared_ptr<ProcessGroup> make_mpi_group(const BackendArgs& args);

}  // namespace dpx::detail
