// Step 2 of Note [CUDA-aware MPI] (comm/backends/mpi/cuda_path.h): the MPI's own answer. No MPI
// header here: the mpi tests ask it too (tests/mpi/mpi_cuda_test.cpp).
#pragma once

#include "comm/backends/mpi/cuda_path.h"

namespace dpx::detail::mpi {

// What the process's MPI says about CUDA buffers: asked on the MPI thread after MPI_Init (which
// this starts, as the first group would), once per process. kNoQuery where dpx was built
// against an MPI offering neither query (cmake/dpx_mpi.cmake), or without MPI.
CudaSupport mpi_cuda_support();

}  // namespace dpx::detail::mpi
