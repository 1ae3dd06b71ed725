// Whether an mpi group on a CUDA device hands MPI the device's pointers or stages the tensors
// through host memory: a pure choice, so it is tested without an MPI or a GPU
// (tests/unit/mpi_cuda_path_test.cpp). No MPI header here: it compiles in every dpx.
//
// Note [CUDA-aware MPI]
// An MPI built with CUDA reads and writes device memory itself; one built without it crashes on
// a device pointer. dpx does not guess which it has:
//  1. At configure time cmake/dpx_mpi.cmake looks for the MPI's own question: MPICH 4's
//     MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, ...) in mpi.h, else OpenMPI's
//     MPIX_Query_cuda_support() in mpi-ext.h. An MPI with neither is "no query".
//  2. When a group on a CUDA device is asked for, the MPI thread asks it, once per process and
//     after MPI_Init (both MPIs answer only then): yes or no.
//  3. DPX_MPI_CUDA_AWARE decides over the answer: 0 stages whatever the MPI says (for an MPI that
//     claims support wrongly, or to compare); 1 insists on device pointers, an error where the
//     MPI says no or dpx has no CUDA, and trusted where the MPI cannot be asked (an MPI without
//     either query that its site knows to be CUDA-aware); unset follows the answer, and no query
//     means staged.
//  4. Direct groups wait, on their issuer thread, until the caller's stream has reached the
//     point of the call before MPI sees the pointers (Note [Direct collectives] in direct.cpp).
#pragma once

#include <optional>
#include <string>

namespace dpx::detail::mpi {

// What the MPI says about CUDA buffers.
enum class CudaSupport {
  kNoQuery,  // dpx was built against an MPI without either query (step 1)
  kNo,
  kYes,
};

enum class CudaPath {
  kStaged,  // copies through pinned host memory (Note [Staged collectives])
  kDirect,  // the device's pointers to MPI (Note [Direct collectives])
};

struct CudaPathInputs {
  bool dpx_has_cuda = false;  // dpx::cuda::built(): only then can it wait on a CUDA stream
  CudaSupport mpi_says = CudaSupport::kNoQuery;
  std::optional<std::string> forced;  // DPX_MPI_CUDA_AWARE, nullopt when unset or empty
};

// Step 3. Throws, naming DPX_MPI_CUDA_AWARE, what it holds and what the MPI said, for a value
// other than 0 or 1 and for a 1 that cannot be honoured. `where` starts the message.
CudaPath choose_cuda_path(const CudaPathInputs& in, const std::string& where);

// "no query", "no", "yes": for messages and docs.
const char* to_string(CudaSupport s);

}  // namespace dpx::detail::mpi
