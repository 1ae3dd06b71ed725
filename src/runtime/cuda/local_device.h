// The device choice of dpx::cuda::local_device(), apart from the environment and the driver so
// that a machine without a GPU can test it.
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <string>

namespace dpx::detail {

// Note [Thread devices]
// A CUDA call without an explicit device works on the calling thread's current device, and a
// new thread's is GPU 0: an event query from a thread that never set its device makes a CUDA
// context on GPU 0 (hundreds of MiB, in every rank's process). So every thread dpx starts sets
// the device it works for before anything else: a group's issuer and stall inspector (the
// group's device; the inspector asks c10d's works whether their events completed), and the
// replica threads of DataParallel (each replica's device and the caller's current stream on it,
// Note [Replica streams] in data_parallel/parallel_apply_threads.h). The rank's own thread gets
// its device from new_process_group(). Threads that never touch a device (the store's server,
// heartbeats, the shm group's worker) set nothing. Devices are set through c10's device guard
// for CUDA, which a test replaces with c10's FakeGuardImpl to see, without a GPU, which device
// each thread set (tests/unit/thread_devices_test.cpp).

// The PCI bus id of CUDA device `index` ("0000:3B:00.0"), the same in every process that sees
// that GPU whatever its CUDA_VISIBLE_DEVICES; "cuda:<index>" where the driver does not say.
std::string gpu_identity(int index);

// `asked` when CPU or indexed (checked against `device_count`), else cuda:(local_rank % count).
at::Device resolve_device(at::Device asked, std::optional<int> local_rank, int device_count);

}  // namespace dpx::detail
