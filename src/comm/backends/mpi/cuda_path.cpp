#include "comm/backends/mpi/cuda_path.h"

#include <c10/util/Exception.h>

namespace dpx::detail::mpi {

const char* to_string(CudaSupport s) {
  switch (s) {
    case CudaSupport::kNoQuery: return "no query (dpx was built against an MPI that offers none)";
    case CudaSupport::kNo: return "no";
    case CudaSupport::kYes: return "yes";
  }
  return "?";
}

CudaPath choose_cuda_path(const CudaPathInputs& in, const std::string& where) {
  const std::string said = std::string("the MPI, asked whether it is CUDA-aware, answers ") +
                           to_string(in.mpi_says);
  if (in.forced) {
    TORCH_CHECK(*in.forced == "0" || *in.forced == "1", where, "DPX_MPI_CUDA_AWARE is '",
                *in.forced, "'; give 0 (stage CUDA tensors through host memory) or 1 (hand "
                "MPI the device's pointers), or unset it to follow the MPI's own answer");
    if (*in.forced == "0") return CudaPath::kStaged;
    TORCH_CHECK(in.dpx_has_cuda, where, "DPX_MPI_CUDA_AWARE=1, but this dpx was built without "
                "CUDA, so it cannot wait for a tensor's stream before MPI reads it; unset it "
                "(the group is then staged) or build dpx against a CUDA LibTorch");
    TORCH_CHECK(in.mpi_says != CudaSupport::kNo, where, "DPX_MPI_CUDA_AWARE=1, but ", said,
                ": it would crash on a device pointer. Unset it (or set 0) to stage CUDA "
                "tensors through host memory, or run with a CUDA-aware build of the MPI");
    return CudaPath::kDirect;
  }
  return in.dpx_has_cuda && in.mpi_says == CudaSupport::kYes ? CudaPath::kDirect
                                                            : CudaPath::kStaged;
}

}  // namespace dpx::detail::mpi
