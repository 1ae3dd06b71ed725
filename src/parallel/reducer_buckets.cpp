// What the Reducer does once, or once in a while: construction (bucket assignment, the
// gradient hooks), the one-time bucket rebuild after the first iteration (Note [Bucket rebuild]),
// the comm hook's registration and the statistics. What it does in every step, in the order a
// step runs, is in reducer_step.cpp.
#include "parallel/reducer.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <c10/util/strides.h>

#include "dpx/parallel/bucket_assignment.h"
#include "parallel/control.h"

namespace dpx::detail {
namespace {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit ReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace

Reducer::Reducer(std::vector<at::Tensor> params, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> pg, ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      pg_(std::move(pg)),
      options_(options),
      div_factor_(pg_->size()) {
  TORCH_INTERNAL_ASSERT(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0,
                        "bucket caps unset");
  const std::size_t n = params_.size();
  hook_count_.assign(n, 0);
  marked_.assign(n, 0);
  globally_unused_.assign(n, 0);
  expected_hooks_.assign(n, 0);
  local_used_ = at::zeros({static_cast<std::int64_t>(n)}, at::kInt);
  // PyTorch fills buckets in registration order and then reverses the list, so that the
  // buckets of the last layers (whose gradients come first) are launched first.
  auto assignment = compute_bucket_assignment_by_size(
      params_, {options_.first_bucket_bytes, options_.bucket_bytes});
  std::reverse(assignment.buckets.begin(), assignment.buckets.end());
  initialize_buckets(assignment.buckets);
  install_hooks();
}

Reducer::~Reducer() {
  for (std::size_t i = 0; i < accumulators_.size(); ++i) {
    accumulators_[i]->del_post_hook(hook_keys_[i]);
  }
}

void Reducer::install_hooks() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    TORCH_INTERNAL_ASSERT(acc, "parameter ", names_[i], " has no gradient accumulator");
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>([this, i] {
      autograd_hook(i);
    })));
    accumulators_.push_back(std::move(acc));
  }
}

void Reducer::initialize_buckets(const std::vector<std::vector<std::size_t>>& assignment) {
  at::NoGradGuard no_grad;
  buckets_.clear();
  buckets_.resize(assignment.size());
  locators_.assign(params_.size(), {});
  for (std::size_t b = 0; b < assignment.size(); ++b) {
    auto& bucket = buckets_[b];
    bucket.variables = assignment[b];
    std::int64_t total = 0;
    for (auto v : bucket.variables) total += params_[v].numel();
    const auto& first = params_[bucket.variables.front()];
    bucket.buffer = at::zeros({total}, first.options().requires_grad(false));
    std::int64_t offset = 0;
    for (std::size_t slot = 0; slot < bucket.variables.size(); ++slot) {
      const auto v = bucket.variables[slot];
      auto& p = params_[v];
      // Shares the buffer's storage without being an autograd view: LibTorch's
      // Optimizer::zero_grad() calls detach_() on .grad, which views refuse.
      auto view = at::empty({0}, bucket.buffer.options());
      view.set_(bucket.buffer.storage(), offset, p.sizes(), c10::contiguous_strides(p.sizes()));
      bucket.views.push_back(view);
      offset += p.numel();
      locators_[v] = {b, slot};
      auto& grad = p.mutable_grad();
      if (options_.gradient_as_bucket_view && grad.defined()) {
        bucket.views.back().copy_(grad);
        grad = bucket.views.back();
      }
    }
  }
  reset_iteration();
}

bool Reducer::rebuild_due() const {
  return !rebuilt_ && iterations_ >= 1 &&
         (options_.static_graph || !options_.find_unused_parameters);
}

// Note [Bucket rebuild]: after the first iteration the buckets are laid out again in the order
// the gradients became ready, so that each bucket fills in one go. Ranks may observe different
// orders; rank 0's is broadcast, as the layout must be identical everywhere.
void Reducer::rebuild_buckets() {
  rebuilt_ = true;
  auto length = at::zeros({1}, at::kLong);
  if (pg_->rank() == 0) length.fill_(static_cast<std::int64_t>(observed_order_.size()));
  control_broadcast(*pg_, length, 0);  // Note [Control tensors]
  const auto n = length.item<std::int64_t>();
  if (n == 0) return;  // rank 0 never saw a gradient (it joined early): keep the layout
  auto order = at::zeros({n}, at::kLong);
  if (pg_->rank() == 0) {
    std::copy(observed_order_.begin(), observed_order_.end(), order.data_ptr<std::int64_t>());
  }
  control_broadcast(*pg_, order, 0);
  std::vector<std::int64_t> indices(order.data_ptr<std::int64_t>(),
                                    order.data_ptr<std::int64_t>() + n);
  std::vector<char> seen(params_.size(), 0);
  for (auto i : indices) seen[i] = 1;
  for (std::size_t i = params_.size(); i-- > 0;) {  // never-ready ones last
    if (!seen[i]) indices.push_back(static_cast<std::int64_t>(i));
  }
  auto assignment = compute_bucket_assignment_by_size(
      params_, {options_.first_bucket_bytes, options_.bucket_bytes}, indices);
  initialize_buckets(assignment.buckets);
  observed_order_.clear();
}

void Reducer::register_comm_hook(std::any state, CommHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!has_hook_, pg_->where(), "register_comm_hook or register_builtin_comm_hook can "
              "only be called once.");
  TORCH_CHECK(hook, pg_->where(), "register_comm_hook: the hook is empty");
  hook_state_ = std::move(state);
  hook_ = std::move(hook);
  has_hook_ = true;
}

DdpStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  DdpStats s;
  for (const auto& bucket : buckets_) {
    s.bucket_sizes_bytes.push_back(bucket.buffer.numel() * bucket.buffer.element_size());
    s.bucket_num_parameters.push_back(bucket.variables.size());
  }
  s.iterations = iterations_;
  s.buckets_rebuilt = rebuilt_;
  if (iterations_ > 0) {
    const double n = static_cast<double>(iterations_);
    s.avg_forward_ms = forward_ms_total_ / n;
    s.avg_backward_compute_ms = backward_ms_total_ / n;
    s.avg_backward_comm_ms = comm_ms_total_ / n;
    s.avg_exposed_comm_ms = exposed_ms_total_ / n;
  }
  return s;
}

}  // namespace dpx::detail
