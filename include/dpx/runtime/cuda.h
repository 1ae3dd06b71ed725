// CUDA devices: whether dpx has CUDA support, and which GPU a process of a job uses.
#pragma once

#include <c10/core/Device.h>

#include <optional>

namespace dpx::cuda {

// Whether this dpx was compiled with CUDA support (DPX_CUDA, docs/install.md): the nccl
// backend, CUDA streams in DDP. Without it, CUDA tensors still work with the staged backends.
bool built();

// CUDA devices this process sees (0 without any, or with a LibTorch without CUDA), as c10's
// device guard for CUDA counts them.
int device_count();

// The device a process uses: `asked` as given when it is the CPU or names an index ("cuda:1"),
// else ("cuda") the GPU of `local_rank` (LOCAL_RANK when nullopt), modulo the devices present:
// with fewer GPUs than local ranks, ranks share them (docs/backends.md, the staged backends).
// Throws a c10::Error naming what is wrong when there is no such device.
at::Device local_device(at::Device asked = at::Device(at::kCUDA),
                        std::optional<int> local_rank = std::nullopt);

// Makes `device` the calling thread's current CUDA device, so that what CUDA does without an
// explicit device (a context, a stream, pinned memory) happens on this rank's GPU rather than
// on GPU 0. Nothing for the CPU. new_process_group() (and so init_process_group()) calls it for
// a CUDA group on the calling thread, and every thread dpx starts for a group or a replica calls
// it first (Note [Thread devices] in src/runtime/cuda/local_device.h).
void set_current_device(at::Device device);

// While one is alive, a CUDA operation that makes the host wait for a GPU (an item(), a copy
// to or from pageable memory, a stream or device synchronize) throws a c10::Error that names
// it, as torch.cuda.set_sync_debug_mode("error") makes PyTorch do; the mode before it returns
// at its end. CUDA's setting is process-wide: for tests and for finding the host waits of a
// training step, not for threads of a running job. Without CUDA support it does nothing.
class HostSyncsForbidden {
 public:
  HostSyncsForbidden();
  ~HostSyncsForbidden();
  HostSyncsForbidden(const HostSyncsForbidden&) = delete;
  HostSyncsForbidden& operator=(const HostSyncsForbidden&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace dpx::cuda
