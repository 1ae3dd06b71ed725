// What tells two processes' GPUs apart on one host (Note [Backend choice]): the PCI bus id. An
// index does not: with a CUDA_VISIBLE_DEVICES of its own per rank (Slurm's --gpus-per-task,
// containers), every rank calls its GPU 0.
#include <string>

#include "runtime/cuda/local_device.h"

#if DPX_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dpx::detail {

std::string gpu_identity(int index) {
#if DPX_WITH_CUDA
  char bus[32] = {0};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus) - 1, index) == cudaSuccess) return bus;
#endif
  return "cuda:" + std::to_string(index);  // no driver answer: the index is all there is
}

}  // namespace dpx::detail
