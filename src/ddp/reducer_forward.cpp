// What the Reducer does before a backward, or instead of one (Note [Reducer iteration] in
// reducer.h, steps 1 and 2): a synchronised forward checks that the previous reduction finished
// and rebuilds the buckets once; prepare_for_backward resets the iteration and finds the
// parameters the outputs do not reach; a joined rank stands in for a backward it does not run.
// The backward itself (hooks, launches, the end-of-backward callback) is in reducer_step.cpp.
#include "ddp/reducer.h"

#include <torch/csrc/autograd/variable.h>

#include <unordered_set>

namespace dpx::detail {

void Reducer::prepare_for_forward(bool allow_rebuild) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_prior_reduction_finished();
  rehook_replaced_accumulators();  // Note [Replaced gradient accumulators]
  if (allow_rebuild && rebuild_due()) rebuild_buckets();
}

// Note [Unfinished reduction] (reducer_errors.cpp).
void Reducer::check_prior_reduction_finished() {
  if (state_ != ReducerState::kReducing && state_ != ReducerState::kAllLaunched) return;
  TORCH_CHECK(false, pg_->where(), unfinished_reduction_message());
}

void Reducer::reset_iteration() {
  next_bucket_ = 0;
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.variables.size();
    bucket.future.reset();
    bucket.work.reset();
    bucket.sparse_grad.reset();
  }
  std::fill(hook_count_.begin(), hook_count_.end(), 0);
  std::fill(marked_.begin(), marked_.end(), 0);
  unused_.clear();
  used_work_.reset();
}

bool Reducer::reduces_used_map() const {
  return (options_.find_unused_parameters && !options_.static_graph) ||
         (options_.static_graph && iterations_ == 0);
}

void Reducer::prepare_for_backward(const std::vector<at::Tensor>& outputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  reset_iteration();
  state_ = ReducerState::kAwaitingGradients;
  times_.mark(Moment::kForwardEnd);
  if (options_.static_graph) {
    if (iterations_ > 0) {
      for (std::size_t i = 0; i < params_.size(); ++i) {
        if (expected_hooks_[i] == 0) unused_.push_back(i);
      }
    }
  } else if (options_.find_unused_parameters) {
    unused_ = find_unused(outputs);
  }
}

// The parameters whose gradient accumulator the autograd graph of `outputs` does not reach.
std::vector<std::size_t> Reducer::find_unused(const std::vector<at::Tensor>& outputs) const {
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& out : outputs) {
    if (!out.defined() || !out.requires_grad()) continue;
    auto fn = out.grad_fn();
    if (!fn) fn = torch::autograd::impl::try_get_grad_accumulator(out);
    if (fn && seen.insert(fn.get()).second) stack.push_back(fn.get());
  }
  while (!stack.empty()) {
    auto* node = stack.back();
    stack.pop_back();
    for (const auto& edge : node->next_edges()) {
      auto* next = edge.function.get();
      if (next && seen.insert(next).second) stack.push_back(next);
    }
  }
  std::vector<std::size_t> unused;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!seen.count(accumulators_[i].get())) unused.push_back(i);
  }
  return unused;
}

void Reducer::shadow_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  reset_iteration();
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    if (buckets_[b].sparse) {
      buckets_[b].sparse_grad.reset();  // no rows: nnz 0
    } else {
      buckets_[b].buffer.zero_();
    }
    launch_bucket(b);
  }
  if (reduces_used_map()) launch_used_map();
  for (auto& bucket : buckets_) {
    bucket.future->wait();
    bucket.future.reset();
    bucket.sparse_grad.reset();
  }
  if (used_work_) {
    used_work_->wait();
    used_work_.reset();
    local_used_.zero_();  // Note [Used under no_sync] (reducer_step.cpp)
  }
  ++iterations_;
}

}  // namespace dpx::detail
