// The nccl backend: one CUDA device per rank; a clear error where dpx was built without CUDA.
#pragma once

#include <memory>

#include "comm/backends/backend_args.h"

namespace dpx::detail {

std::shared_ptr<ProcessGroup> make_nccl_group(const BackendArgs& args);

}  // namespace dpx::detail
