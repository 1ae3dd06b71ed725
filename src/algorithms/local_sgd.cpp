#include "dpx/algorithms/local_sgd.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <map>

namespace dpx {
namespace {

const torch::optim::Optimizer& non_null(const std::shared_ptr<torch::optim::Optimizer>& optim) {
  TORCH_CHECK(optim, "PostLocalSGDOptimizer: the optimizer is null");
  return *optim;
}

}  // namespace

void average_parameters(const std::vector<at::Tensor>& params, ProcessGroup& group) {
  at::NoGradGuard no_grad;
  std::map<at::ScalarType, std::vector<at::Tensor>> by_dtype;
  for (const auto& p : params) by_dtype[p.scalar_type()].push_back(p);
  for (auto& [dtype, tensors] : by_dtype) {
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
    auto buffer = at::cat(flat).div_(group.size());
    group.allreduce(buffer)->synchronize();
    int64_t offset = 0;
    for (auto& t : tensors) {
      t.copy_(buffer.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

PeriodicModelAverager::PeriodicModelAverager(int64_t period, std::shared_ptr<ProcessGroup> group,
                                             int64_t warmup_steps)
    : period_(period), warmup_steps_(warmup_steps), group_(std::move(group)) {
  TORCH_CHECK(period >= 1, "PeriodicModelAverager: period must be at least 1, got ", period);
  TORCH_CHECK(warmup_steps >= 0, "PeriodicModelAverager: warmup_steps must not be negative, got ",
              warmup_steps);
  TORCH_CHECK(group_, "PeriodicModelAverager: the process group is null");
}

void PeriodicModelAverager::average_parameters(const std::vector<at::Tensor>& params) {
  if (step_ >= warmup_steps_ && (step_ - warmup_steps_) % period_ == 0) {
    std::vector<at::Tensor> with_grad;
    for (const auto& p : params) {
      if (p.grad().defined()) with_grad.push_back(p);
    }
    if (!with_grad.empty() && group_->size() > 1) dpx::average_parameters(with_grad, *group_);
  }
  ++step_;
}

void PeriodicModelAverager::average_parameters(
    const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  std::vector<at::Tensor> params;
  for (const auto& g : groups) params.insert(params.end(), g.params().begin(), g.params().end());
  average_parameters(params);
}

PostLocalSGDOptimizer::PostLocalSGDOptimizer(std::shared_ptr<torch::optim::Optimizer> optim,
                                             std::shared_ptr<PeriodicModelAverager> averager)
    : Optimizer(non_null(optim).param_groups(), non_null(optim).defaults().clone()),
      optim_(std::move(optim)),
      averager_(std::move(averager)) {
  TORCH_CHECK(averager_, "PostLocalSGDOptimizer: the averager is null");
}

at::Tensor PostLocalSGDOptimizer::step(LossClosure closure) {
  TORCH_CHECK(param_groups().size() == optim_->param_groups().size(),
              "PostLocalSGDOptimizer: add parameter groups to the wrapped optimizer before "
              "wrapping it");
  for (size_t i = 0; i < param_groups().size(); ++i) {
    optim_->param_groups()[i].set_options(param_groups()[i].options().clone());
  }
  auto loss = optim_->step(std::move(closure));
  averager_->average_parameters(optim_->param_groups());
  return loss;
}

void PostLocalSGDOptimizer::save(torch::serialize::OutputArchive& archive) const {
  optim_->save(archive);
  archive.write("step", c10::IValue(averager_->step()));
}

void PostLocalSGDOptimizer::load(torch::serialize::InputArchive& archive) {
  optim_->load(archive);
  c10::IValue step;
  if (archive.try_read("step", step)) {
    averager_->set_step(step.toInt());
  } else {
    TORCH_WARN("PostLocalSGDOptimizer: the archive has no 'step'; the model averager starts "
               "again from step 0");
    averager_->set_step(0);
  }
}

namespace hooks {

std::shared_ptr<Future> post_local_sgd_hook(std::any& state, GradBucket& bucket) {
  auto* s = std::any_cast<PostLocalSGDState>(&state);
  TORCH_CHECK(s != nullptr, "post_local_sgd_hook: the state must be a dpx::hooks::PostLocalSGDState");
  if (s->iter < s->start_local_sgd_iter) {
    if (bucket.is_last) ++s->iter;
    std::any global = s->process_group ? s->process_group : bucket.process_group;
    return allreduce_hook(global, bucket);
  }
  if (!s->post_local_gradient_allreduce) return Future::ready(bucket.buffer);
  TORCH_CHECK(s->subgroup, "post_local_sgd_hook: post_local_gradient_allreduce needs the "
              "subgroup that all-reduces gradients in the local phase (PostLocalSGDState::"
              "subgroup, e.g. the ranks of this host); dpx does not create subgroups by itself");
  std::any sub = s->subgroup;
  return allreduce_hook(sub, bucket);
}

}  // namespace hooks
}  // namespace dpx
