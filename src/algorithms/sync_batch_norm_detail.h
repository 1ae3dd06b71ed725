// SyncBatchNorm's training computation, apart from the module.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "dpx/comm/process_group.h"

namespace dpx::detail {

// The group's batch statistics per channel.
struct BatchStats {
  at::Tensor mean;
  at::Tensor var;     // biased (divided by the count)
  at::Tensor invstd;  // 1 / sqrt(var + eps)
  at::Tensor total_count;  // 0-dim: samples per channel over every rank
};

// Fails on every rank, naming each rank's count, unless all ranks have `channels` channels.
void check_channels_agree(ProcessGroup& pg, int64_t channels);

BatchStats gather_batch_stats(ProcessGroup& pg, const at::Tensor& x, double eps);

// Normalises `input` with the group's statistics, updates the running ones (when defined) and
// attaches the backward of Note [SyncBatchNorm backward].
at::Tensor sync_batch_norm(const std::shared_ptr<ProcessGroup>& group, const at::Tensor& input,
                           const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& running_mean, const at::Tensor& running_var,
                           double momentum, double eps);

}  // namespace dpx::detail
