// A unit's steps in one iteration, top to bottom (Note [Unit iteration] in fsdp_unit.h); its
// collectives are in fsdp_collectives.cpp, the autograd hooks in fsdp_hooks.cpp.
#include "fsdp/fsdp_unit.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include "fsdp/fsdp_context.h"

namespace dpx::detail {

FsdpUnit::FsdpUnit(std::shared_ptr<torch::nn::Module> module, std::vector<FsdpParam> params,
                   std::shared_ptr<ProcessGroup> pg, FullyShardOptions options)
    : module_(module), params_(std::move(params)), pg_(std::move(pg)),
      options_(std::move(options)) {
  plan_gathers();
}

void FsdpUnit::set_context(std::shared_ptr<FsdpContext> context, bool root) {
  context_ = std::move(context);
  root_ = root;
}

at::ScalarType FsdpUnit::param_dtype(const FsdpParam& p) const {
  return options_.mp_policy.param_dtype.value_or(p.dtype());
}

at::ScalarType FsdpUnit::reduce_dtype(const FsdpParam& p) const {
  return options_.mp_policy.reduce_dtype.value_or(p.dtype());
}

std::vector<at::Tensor> FsdpUnit::cast_inputs(std::vector<at::Tensor> inputs) const {
  const auto& mp = options_.mp_policy;
  if (!mp.cast_forward_inputs || !mp.param_dtype) return inputs;
  for (auto& t : inputs) {
    if (t.defined() && at::isFloatingType(t.scalar_type())) t = t.to(*mp.param_dtype);
  }
  return inputs;
}

std::vector<at::Tensor> FsdpUnit::pre_forward(std::vector<at::Tensor> inputs) {
  if (!context_) FsdpContext::init_root(shared_from_this());
  auto& ctx = *context_;
  if (root_ && !ctx.in_forward()) ctx.start_forward();
  state_ = TrainingState::kForward;
  unshard();
  wait_for_unshard();
  if (ctx.in_forward()) ctx.prefetch_forward(this);
  inputs = cast_inputs(std::move(inputs));
  if (at::GradMode::is_enabled()) inputs = attach_post_backward(std::move(inputs));
  return inputs;
}

std::vector<at::Tensor> FsdpUnit::post_forward(std::vector<at::Tensor> outputs) {
  auto& ctx = *context_;
  if (reshards_after_forward()) reshard();
  if (ctx.in_forward()) ctx.record_forward(this);
  state_ = TrainingState::kIdle;
  bool backward_follows = false;
  if (at::GradMode::is_enabled()) {
    hook_outputs(outputs);
    for (const auto& t : outputs) backward_follows = backward_follows || (t.defined() && t.requires_grad());
  }
  if (const auto& dtype = options_.mp_policy.output_dtype) {
    for (auto& t : outputs) {
      if (t.defined() && at::isFloatingType(t.scalar_type())) t = t.to(*dtype);
    }
  }
  if (root_ && ctx.in_forward()) ctx.end_forward(backward_follows);
  return outputs;
}

void FsdpUnit::forward_failed() noexcept {
  try {
    state_ = TrainingState::kIdle;
    if (root_ && context_ && context_->in_forward()) {
      context_->end_forward(/*backward_follows=*/false);
    } else {
      reshard();
    }
  } catch (...) {
    // The forward's own error is the one to report; a failed reshard adds nothing to it.
  }
}

void FsdpUnit::pre_backward() {
  if (state_ == TrainingState::kPreBackward) return;
  state_ = TrainingState::kPreBackward;
  context_->backward_started();
  unshard();
  wait_for_unshard();
  context_->prefetch_backward(this);
}

void FsdpUnit::post_backward() {
  if (state_ == TrainingState::kPostBackward) return;
  state_ = TrainingState::kPostBackward;
  if (!requires_gradient_sync_) {
    for (auto& p : params_) {
      if (p.requires_grad()) p.accumulate_unsharded_grad(reduce_dtype(p));
    }
    reshard();
    return;
  }
  reduce_gradients();
}

}  // namespace dpx::detail
