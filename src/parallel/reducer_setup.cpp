// The Reducer's construction, bucket layout and one-time rebuild, unused-parameter search,
// error reports and statistics. The per-iteration hot path is in reducer.cpp.
#include "parallel/reducer.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <c10/util/strides.h>

#include <unordered_set>

#include "dpx/parallel/bucket_assignment.h"

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

void Reducer::reset_iteration() {
  next_bucket_ = 0;
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.variables.size();
    bucket.future.reset();
  }
  std::fill(hook_count_.begin(), hook_count_.end(), 0);
  std::fill(marked_.begin(), marked_.end(), 0);
  unused_.clear();
  local_used_.zero_();
  used_work_.reset();
}

bool Reducer::reduces_used_map() const {
  return (options_.find_unused_parameters && !options_.static_graph) ||
         (options_.static_graph && iterations_ == 0);
}

bool Reducer::rebuild_due() const {
  return !rebuilt_ && iterations_ >= 1 &&
         (options_.static_graph || !options_.find_unused_parameters);
}

void Reducer::prepare_for_forward(bool allow_rebuild) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_prior_reduction_finished();
  if (allow_rebuild && rebuild_due()) rebuild_buckets();
}

// Note [Bucket rebuild]: after the first iteration the buckets are laid out again in the order
// the gradients became ready, so that each bucket fills in one go. Ranks may observe different
// orders; rank 0's is broadcast, as the layout must be identical everywhere.
void Reducer::rebuild_buckets() {
  rebuilt_ = true;
  auto length = at::zeros({1}, at::kLong);
  if (pg_->rank() == 0) length.fill_(static_cast<std::int64_t>(observed_order_.size()));
  pg_->broadcast(length)->wait();
  const auto n = length.item<std::int64_t>();
  if (n == 0) return;  // rank 0 never saw a gradient (it joined early): keep the layout
  auto order = at::zeros({n}, at::kLong);
  if (pg_->rank() == 0) {
    std::copy(observed_order_.begin(), observed_order_.end(), order.data_ptr<std::int64_t>());
  }
  pg_->broadcast(order)->wait();
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

void Reducer::prepare_for_backward(const std::vector<at::Tensor>& outputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  reset_iteration();
  state_ = ReducerState::kAwaitingGradients;
  forward_end_ = Clock::now();
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

std::string Reducer::names_of(const std::vector<std::size_t>& indices) const {
  std::string out;
  for (auto i : indices) out += (out.empty() ? "" : ", ") + names_[i];
  return out;
}

void Reducer::check_prior_reduction_finished() {
  if (state_ != ReducerState::kReducing && state_ != ReducerState::kAllLaunched) return;
  std::vector<std::size_t> unmarked;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!marked_[i]) unmarked.push_back(i);
  }
  std::string msg = "Expected to have finished reduction in the prior iteration before starting "
                    "a new one. ";
  if (options_.static_graph) {
    msg += "This error indicates that your training graph has changed in this iteration, e.g. "
           "a parameter was used in the first iteration but not in this one; this is not "
           "compatible with static_graph set to true.";
  } else {
    msg += "This error indicates that your module has parameters that were not used in "
           "producing loss. ";
    msg += options_.find_unused_parameters
               ? "Since find_unused_parameters is enabled, this likely means that not all "
                 "forward outputs participate in computing the loss. "
               : "You can enable unused parameter detection by passing "
                 "find_unused_parameters=True (DistributedDataParallelOptions::"
                 "find_unused_parameters = true), and by ";
    msg += "making sure all forward function outputs participate in calculating loss.";
  }
  std::string indices;
  for (auto i : unmarked) indices += (indices.empty() ? "" : " ") + std::to_string(i);
  const std::string rank = std::to_string(pg_->rank());
  if (options_.debug == DebugLevel::kOff) {
    msg += "\nParameter indices which did not receive grad for rank " + rank + ": " + indices +
           "\nIn addition, you can set the environment variable DPX_DEBUG (or "
           "TORCH_DISTRIBUTED_DEBUG) to INFO or DETAIL to print out which parameters did not "
           "receive gradient on this rank as part of this error.";
  } else {
    msg += "\nParameters which did not receive grad for rank " + rank + ": " +
           names_of(unmarked) + "\nParameter indices which did not receive grad for rank " +
           rank + ": " + indices;
  }
  TORCH_CHECK(false, pg_->where(), msg);
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
