// Post-local SGD (PyTorch's torch.distributed.algorithms.model_averaging and
// torch.distributed.optim.PostLocalSGDOptimizer): after a warm-up of ordinary DDP steps, ranks
// step on their local gradients alone and average their parameters every `period` steps,
// trading gradient all-reduces for fewer, larger parameter averages.
#pragma once

#include <torch/optim/optimizer.h>

#include <any>
#include <cstdint>
#include <memory>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/ddp/comm_hooks.h"

namespace dpx {

// Overwrites each tensor with its mean over the group's ranks: one all-reduce per dtype of the
// tensors flattened, each divided by the group size first (as PyTorch does).
void average_parameters(const std::vector<at::Tensor>& params, ProcessGroup& group);

// PyTorch's PeriodicModelAverager: average_parameters() counts calls (its step) and averages on
// the calls at warmup_steps, warmup_steps + period, ... Collective on those calls.
class PeriodicModelAverager {
 public:
  PeriodicModelAverager(int64_t period, std::shared_ptr<ProcessGroup> group,
                        int64_t warmup_steps = 0);

  // The parameters averaged are those with a gradient (PyTorch's get_params_to_average).
  void average_parameters(const std::vector<at::Tensor>& params);
  void average_parameters(const std::vector<torch::optim::OptimizerParamGroup>& groups);

  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  int64_t period() const { return period_; }
  int64_t warmup_steps() const { return warmup_steps_; }

 private:
  int64_t period_;
  int64_t warmup_steps_;
  std::shared_ptr<ProcessGroup> group_;
  int64_t step_ = 0;
};

// PyTorch's PostLocalSGDOptimizer: step() runs the wrapped optimizer, then the averager. Change
// the learning rate (or any option) through this optimizer's param_groups(): each step hands
// them to the wrapped one. save()/load() carry the wrapped optimizer's state and the averager's
// step (archives saved without it load with step 0, as in PyTorch). Like LibTorch's optimizers,
// load() restores state, not options.
class PostLocalSGDOptimizer : public torch::optim::Optimizer {
 public:
  PostLocalSGDOptimizer(std::shared_ptr<torch::optim::Optimizer> optim,
                        std::shared_ptr<PeriodicModelAverager> averager);

  at::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

  torch::optim::Optimizer& optimizer() { return *optim_; }
  PeriodicModelAverager& averager() { return *averager_; }

 private:
  std::shared_ptr<torch::optim::Optimizer> optim_;
  std::shared_ptr<PeriodicModelAverager> averager_;
};

namespace hooks {

// The state of post_local_sgd_hook (PyTorch's PostLocalSGDState).
struct PostLocalSGDState {
  std::shared_ptr<ProcessGroup> process_group;  // the global group; null: the DDP module's
  // The group that still all-reduces gradients in the local phase (say, the ranks of one host);
  // required when post_local_gradient_allreduce is true.
  std::shared_ptr<ProcessGroup> subgroup;
  int64_t start_local_sgd_iter = 0;
  bool post_local_gradient_allreduce = true;
  int64_t iter = 0;  // backward passes seen
};

// Global gradient averaging for the first start_local_sgd_iter iterations, then averaging over
// `subgroup` only, or none at all (the local gradient) when post_local_gradient_allreduce is
// false. `state` must hold a PostLocalSGDState, which the hook updates.
std::shared_ptr<Future> post_local_sgd_hook(std::any& state, GradBucket& bucket);

}  // namespace hooks
}  // namespace dpx
