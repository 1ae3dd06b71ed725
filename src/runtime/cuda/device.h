// The device choice of dpx::cuda::local_device(), apart from the environment and the driver so
// that a machine without a GPU can test it.
#pragma once

#include <c10/core/Device.h>

#include <optional>
#include <string>

namespace dpx::detail {

// The PCI bus id of CUDA device `index` ("0000:3B:00.0"), the same in every process that sees
// that GPU whatever its CUDA_VISIBLE_DEVICES; "cuda:<index>" where the driver does not say.
std::string gpu_identity(int index);

// `asked` when CPU or indexed (checked against `device_count`), else cuda:(local_rank % count).
at::Device resolve_device(at::Device asked, std::optional<int> local_rank, int device_count);

}  // namespace dpx::detail
