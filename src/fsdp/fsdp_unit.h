// A unit: the module fully_shard was applied to, the parameters it shards, and its part in one
// iteration.
//
// Note [Unit iteration]
// Forward, per unit, in the order the model calls them:
//  1. pre_forward: the first unit to run (the root) initialises the units below it once
//     (fsdp_context.h) and starts the iteration; the unit's all-gather is waited for (issued
//     now, or earlier by a prefetch), its parameters become whole, the next unit's all-gather
//     is issued (Note [Prefetch]); inputs are cast (mp_policy) and, when they require grad,
//     pass through a PostBackward node whose backward runs once the unit's backward is done.
//  2. post_forward: the unit is resharded (reshard_after_forward; never the root), recorded in
//     the forward order, and a hook on each output that requires grad marks its backward's
//     start. The root's post_forward ends the forward: without a backward to come (no grad
//     mode, no output requiring grad), every unit is resharded.
// Backward, in reverse:
//  3. pre_backward (the first output hook to fire): the end-of-backward callback is queued
//     once; the unit is all-gathered again (unless still whole) and the unit before it in the
//     forward order is prefetched.
//  4. post_backward (PostBackward, or the end-of-backward callback for units it did not reach):
//     the whole gradients are taken from .grad, the unit is resharded, the previous
//     reduce-scatter is finished and this unit's is issued (Note [Gradient reduction]).
//  5. The end-of-backward callback runs post_backward for the units step 4 missed, finishes
//     every reduce-scatter and leaves each parameter holding its shard and sharded gradient.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/fsdp/fsdp_options.h"
#include "fsdp/fsdp_param.h"

namespace dpx::detail {

class FsdpContext;

enum class TrainingState { kIdle, kForward, kPreBackward, kPostBackward };

class FsdpUnit : public std::enable_shared_from_this<FsdpUnit> {
 public:
  FsdpUnit(std::shared_ptr<torch::nn::Module> module, std::vector<FsdpParam> params,
           std::shared_ptr<ProcessGroup> pg, FullyShardOptions options);

  // Note [Unit iteration], steps 1-4.
  std::vector<at::Tensor> pre_forward(std::vector<at::Tensor> inputs);
  std::vector<at::Tensor> post_forward(std::vector<at::Tensor> outputs);
  void pre_backward();
  void post_backward();
  void forward_failed() noexcept;

  // Issues the all-gather of the parameters (nothing when they are whole or one is in flight).
  void unshard();
  // Waits for the all-gather and makes the parameters whole.
  void wait_for_unshard();
  void reshard();
  bool is_unsharded() const { return unsharded_; }

  std::shared_ptr<torch::nn::Module> module() const { return module_.lock(); }
  const std::shared_ptr<ProcessGroup>& process_group() const { return pg_; }
  std::vector<FsdpParam>& params() { return params_; }
  const std::vector<FsdpParam>& params() const { return params_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const FullyShardOptions& options() const { return options_; }

  // Set by the root's initialisation (fsdp_context.cpp).
  const std::shared_ptr<FsdpContext>& context() const { return context_; }
  void set_context(std::shared_ptr<FsdpContext> context, bool root);
  bool is_root() const { return root_; }
  TrainingState state() const { return state_; }
  void set_state(TrainingState state) { state_ = state; }

  void set_requires_gradient_sync(bool on) { requires_gradient_sync_ = on; }
  void set_reshard_after_forward(bool on) { options_.reshard_after_forward = on; }
  bool reshards_after_forward() const { return options_.reshard_after_forward.value_or(!root_); }

 private:
  struct Gather {  // the all-gather of the parameters of one dtype
    at::ScalarType dtype;
    std::vector<std::size_t> params;
    std::vector<int64_t> columns;  // of each parameter's padded shard in a rank's part
    int64_t total = 0;             // elements of a rank's part
    at::Tensor input, output;
    std::shared_ptr<Work> work;
  };

  at::ScalarType param_dtype(const FsdpParam& p) const;
  at::ScalarType reduce_dtype(const FsdpParam& p) const;
  void plan_gathers();
  std::vector<at::Tensor> cast_inputs(std::vector<at::Tensor> inputs) const;
  std::vector<at::Tensor> attach_post_backward(std::vector<at::Tensor> inputs);
  void hook_outputs(const std::vector<at::Tensor>& outputs);
  void reduce_gradients();

  std::weak_ptr<torch::nn::Module> module_;
  std::vector<FsdpParam> params_;
  std::shared_ptr<ProcessGroup> pg_;
  FullyShardOptions options_;
  std::string name_;  // the module's name under the root ("" for the root)
  std::shared_ptr<FsdpContext> context_;
  bool root_ = false;
  TrainingState state_ = TrainingState::kIdle;
  bool unsharded_ = false;
  std::vector<Gather> gathers_;
  bool gather_in_flight_ = false;
  bool requires_gradient_sync_ = true;
};

}  // namespace dpx::detail
