// Whether the CUDA code was compiled: DPX_WITH_CUDA comes from cmake/dpx_cuda.cmake.
#include "dpx/runtime/cuda.h"

namespace dpx::cuda {

bool built() {
#if DPX_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace dpx::cuda
