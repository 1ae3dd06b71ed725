// DataParallel's gradient sum over the GPUs of one process, with NCCL.
#pragma once

#include <ATen/ATen.h>

#include <vector>

namespace dpx::detail {

// Note [One NCCL reduce per dtype]
// grads[r][j] is replica r's gradient of parameter j, on devices[r]. For every j for which each
// replica has a dense gradient of one dtype, sets sums[j] to their sum on devices[0], with one
// NCCL reduce per dtype and 10 MiB run over the replicas' flattened, concatenated gradients: a
// kernel per GPU and run instead of (replicas - 1) copies and adds per parameter, which is how
// PyTorch's DataParallel sums them too (reduce_add_coalesced, 10 MB buffers). The reduce runs
// on each device's current stream, after the backward work queued there. Leaves sums[j] alone
// for the other j, and does nothing (returns false) when NCCL cannot serve: dpx built without
// CUDA, fewer than two replicas, or devices that are not distinct CUDA devices.
bool nccl_reduce_add(const std::vector<std::vector<at::Tensor>>& grads,
                     const std::vector<at::Device>& devices, std::vector<at::Tensor>& sums);

}  // namespace dpx::detail
