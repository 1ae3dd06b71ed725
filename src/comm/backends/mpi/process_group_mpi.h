// The mpi backend: MPI's non-blocking collectives behind dpx's interface, set up from
// MPI_COMM_WORLD without a store (docs/backends.md, "The mpi backend"). Where dpx was built
// without MPI (cmake/dpx_mpi.cmake), each call is a clear error that names what to install.
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
// On the CPU, or on a CUDA device where mpi_takes_cuda_pointers says so (the group then hands
// MPI the device's pointers: Note [Direct collectives] in comm/backends/mpi/direct.cpp).
std::shared_ptr<ProcessGroup> make_mpi_group(const BackendArgs& args);

// For a group on a CUDA device: whether this process's MPI takes the device's pointers, from
// what it says and DPX_MPI_CUDA_AWARE (Note [CUDA-aware MPI] in comm/backends/mpi/cuda_path.h);
// if not, the caller stages the tensors over an mpi group on the CPU. Initialises MPI. Throws
// where DPX_MPI_CUDA_AWARE is malformed or cannot be honoured.
bool mpi_takes_cuda_pointers(const BackendArgs& args);

}  // namespace dpx::detail
