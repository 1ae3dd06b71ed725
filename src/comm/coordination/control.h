// Collectives on DDP's control tensors (Note [Control tensors]).
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <optional>

#include "dpx/comm/process_group.h"

namespace dpx::detail {

// Note [Control tensors]
// DDP's bookkeeping (how many ranks are active, the bucket order, the used-parameter map, the
// parameter shapes) lives in small CPU tensors that host code reads and writes. On a group whose
// tensors live on a device (nccl on CUDA), each collective runs on a device copy, and the result
// is copied back into the CPU tensor before the caller sees it; on a CPU group, on the tensor
// itself. The callers stay device-agnostic.

// Asynchronous: `cpu` holds the result once the returned Work's wait() has returned.
std::shared_ptr<Work> control_allreduce(ProcessGroup& pg, at::Tensor& cpu,
                                        ReduceOp op = ReduceOp::kSum);
// Blocking; `timeout` nullopt is the group's.
void control_broadcast(ProcessGroup& pg, at::Tensor& cpu, int root,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt);
void control_allgather(ProcessGroup& pg, at::Tensor& output, const at::Tensor& input,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt);

}  // namespace dpx::detail
