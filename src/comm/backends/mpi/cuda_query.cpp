#include "comm/backends/mpi/cuda_query.h"

#if DPX_WITH_MPI
#include <mpi.h>
#if DPX_MPI_CUDA_QUERY
#include <mpi-ext.h>
#endif

#include "comm/backends/mpi/runtime.h"
#include "dpx/errors.h"

namespace dpx::detail::mpi {
namespace {

// On the MPI thread. The definitions come from cmake/dpx_mpi.cmake, which compiled and linked
// each query against this MPI.
CudaSupport ask() {
#if DPX_MPI_GPU_QUERY
  int yes = 0;
  const int rc = MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &yes);
  if (rc != MPI_SUCCESS) {
    throw DistributedError("mpi: MPIX_GPU_query_support failed: " + error_string(rc));
  }
  return yes ? CudaSupport::kYes : CudaSupport::kNo;
#elif DPX_MPI_CUDA_QUERY
  return MPIX_Query_cuda_support() == 1 ? CudaSupport::kYes : CudaSupport::kNo;
#else
  return CudaSupport::kNoQuery;
#endif
}

}  // namespace

CudaSupport mpi_cuda_support() {
  // The answer belongs to the library the process loaded, so it is asked once.
  static const CudaSupport answer = [] {
    CudaSupport a = CudaSupport::kNoQuery;
    Runtime::instance().call([&] { a = ask(); });
    return a;
  }();
  return answer;
}

}  // namespace dpx::detail::mpi

#else  // !DPX_WITH_MPI

namespace dpx::detail::mpi {

CudaSupport mpi_cuda_support() { return CudaSupport::kNoQuery; }

}  // namespace dpx::detail::mpi

#endif  // DPX_WITH_MPI
