// The device choice of dpx::cuda::local_device(), apart from the environment and the driver so
// that a machine without a GPU can test it.
#pragma once

#include <c10/core/Device.h>

#include <optional>

namespace dpx::detail {

// `asked` when CPU or indexed (checked against `device_count`), else cuda:(local_rank % count).
at::Device resolve_device(at::Device asked, std::optional<int> local_rank, int device_count);

}  // namespace dpx::detail
