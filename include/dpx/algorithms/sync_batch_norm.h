// SyncBatchNorm: batch normalisation whose batch statistics are those of every rank's batch
// together (PyTorch's nn.SyncBatchNorm). Without a process group, with a group of one rank, or
// in evaluation, it computes exactly what torch::nn::BatchNorm{1,2,3}d computes.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "dpx/comm/process_group.h"

namespace dpx {

struct SyncBatchNormOptions {
  explicit SyncBatchNormOptions(std::int64_t num_features) : num_features(num_features) {}
  std::int64_t num_features;
  double eps = 1e-5;
  // Weight of the new batch statistics in the running ones; nullopt: the cumulative average.
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

// The tensors of a batch normalisation module, for a SyncBatchNorm to take over.
struct BatchNormTensors {
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};

class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  explicit SyncBatchNormImpl(SyncBatchNormOptions options,
                             std::shared_ptr<ProcessGroup> group = nullptr);
  // Registers `tensors` (shared, not copied) instead of new ones: how convert_sync_batchnorm
  // keeps a BatchNorm's parameters and statistics. A clone() gets tensors of its own.
  SyncBatchNormImpl(SyncBatchNormOptions options, std::shared_ptr<ProcessGroup> group,
                    BatchNormTensors tensors);
  explicit SyncBatchNormImpl(std::int64_t num_features)
      : SyncBatchNormImpl(SyncBatchNormOptions(num_features)) {}

  void reset() override;
  void reset_parameters();
  void reset_running_stats();
  void pretty_print(std::ostream& stream) const override;

  // input: (N, C, ...) with C == num_features. Any N, including 0 on some ranks.
  at::Tensor forward(const at::Tensor& input);

  // The group whose ranks share batch statistics; nullptr: this rank alone (plain BatchNorm).
  void set_process_group(std::shared_ptr<ProcessGroup> group) {
    group_ = std::move(group);
    channels_checked_ = false;
  }
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }

  SyncBatchNormOptions options;
  // The names and roles of torch::nn::BatchNorm's, so state dicts and checkpoints carry over.
  at::Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::optional<BatchNormTensors> adopted_;  // consumed by the first reset()
  bool channels_checked_ = false;  // the group's ranks agreed on the channel count
};

TORCH_MODULE(SyncBatchNorm);

// Replaces every torch::nn::BatchNorm{1,2,3}d in `module`'s tree by a SyncBatchNorm over
// `group` that shares its weight, bias and running statistics, and gives `group` to every
// SyncBatchNorm already there; returns the module to use (a new one when `module` itself is a
// BatchNorm, else `module`, changed in place).
// Note [Converting in C++]
// A C++ module calls its children through its own typed members, so only a caller that dispatches
// through the module tree can be redirected: a BatchNorm inside a torch::nn::Sequential is replaced
// in place. A BatchNorm held by any other module (a custom module's member, a ModuleList or
// ModuleDict entry) cannot be, and is an error naming it, found before anything changes: declare it
// as dpx::SyncBatchNorm (plain BatchNorm until it has a group) instead.
std::shared_ptr<torch::nn::Module> convert_sync_batchnorm(std::shared_ptr<torch::nn::Module> module,
                                                          std::shared_ptr<ProcessGroup> group);

}  // namespace dpx
