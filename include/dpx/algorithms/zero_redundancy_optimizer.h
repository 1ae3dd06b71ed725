// ZeroRedundancyOptimizer (ZeRO stage 1, PyTorch's torch.distributed.optim.ZeroRedundancyOptimizer):
// each rank keeps the optimizer state of its shard of the parameters only, steps that shard, and
// broadcasts it to the other ranks, so every rank ends the step with every updated parameter.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx {

// Builds the optimizer each rank runs over its shard, e.g.
// optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions(1e-3)).
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(
    std::vector<torch::optim::OptimizerParamGroup>)>;

template <class Optim, class Options>
OptimizerFactory optimizer_factory(Options defaults) {
  return [defaults](std::vector<torch::optim::OptimizerParamGroup> groups) {
    return std::make_unique<Optim>(std::move(groups), defaults);
  };
}

// Note [ZeRO partition]
// Parameters go to ranks as PyTorch assigns them: group by group, largest first (ties in the given
// order), each to the rank with the fewest elements so far, counted over all groups. A rank's
// optimizer holds, for every group, its share of that group (maybe none).
class ZeroRedundancyOptimizer : public torch::optim::Optimizer {
 public:
  ZeroRedundancyOptimizer(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                          std::shared_ptr<ProcessGroup> group, OptimizerFactory make);
  ZeroRedundancyOptimizer(std::vector<at::Tensor> params, std::shared_ptr<ProcessGroup> group,
                          OptimizerFactory make);

  // Steps this rank's shard with this optimizer's current options (an LR scheduler may change
  // them), then broadcasts each rank's shard from it. Collective: every rank calls it.
  at::Tensor step(LossClosure closure = nullptr) override;

  // Collects every rank's optimizer state on rank `to`, which can then save() it. Collective.
  void consolidate_state_dict(int to = 0);
  // On the rank given to consolidate_state_dict: writes every rank's state (torch::save works).
  void save(torch::serialize::OutputArchive& archive) const override;
  // On every rank: takes its shard's state from a saved one, whatever the world size it was
  // saved with.
  void load(torch::serialize::InputArchive& archive) override;

  // The parameters whose state rank r keeps, in the order it steps them.
  const std::vector<at::Tensor>& shard(int rank) const { return shards_.at(rank); }
  torch::optim::Optimizer& local_optimizer() { return *local_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }

 private:
  ZeroRedundancyOptimizer(std::unique_ptr<torch::optim::Optimizer> whole,
                          std::shared_ptr<ProcessGroup> group, OptimizerFactory make);

  std::shared_ptr<ProcessGroup> group_;
  OptimizerFactory make_;
  std::vector<std::vector<at::Tensor>> shards_;      // [rank]
  std::unique_ptr<torch::optim::Optimizer> local_;  // over shards_[group_->rank()]
  std::optional<std::vector<std::string>> consolidated_;  // [rank] saved local optimizers
};

}  // namespace dpx
