// What the Reducer does once, or once in a while: construction (bucket assignment, the
// gradient hooks), the one-time bucket rebuild after the first iteration (Note [Bucket rebuild]),
// the comm hook's registration and the statistics. What it does in every step, in the order a
// step runs, is in reducer_step.cpp.
#include "ddp/reducer.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <c10/util/strides.h>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dpx/ddp/bucket_assignment.h"
#include "comm/coordination/control.h"
#include "runtime/env_read.h"

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
      div_factor_(pg_->size()),
      times_(pg_->options().device) {
  TORCH_INTERNAL_ASSERT(options_.bucket_bytes > 0 && options_.first_bucket_bytes > 0,
                        "bucket caps unset");
  const std::size_t n = params_.size();
  TORCH_INTERNAL_ASSERT(options_.expect_sparse_gradient.empty() ||
                            options_.expect_sparse_gradient.size() == n,
                        "expect_sparse_gradient has ", options_.expect_sparse_gradient.size(),
                        " flags for ", n, " parameters");
  hook_count_.assign(n, 0);
  marked_.assign(n, 0);
  globally_unused_.assign(n, 0);
  expected_hooks_.assign(n, 0);
  local_used_ = at::zeros({static_cast<std::int64_t>(n)}, at::kInt);
  // PyTorch fills buckets in registration order and then reverses the list, so that the
  // buckets of the last layers (whose gradients come first) are launched first.
  auto assignment = compute_bucket_assignment_by_size(
      params_, {options_.first_bucket_bytes, options_.bucket_bytes},
      options_.expect_sparse_gradient);
  std::reverse(assignment.buckets.begin(), assignment.buckets.end());
  initialize_buckets(assignment.buckets);
  install_hooks();
  if (auto dir = env_string("DPX_STEP_REPORT_DIR")) report_dir_ = *dir;
  report_every_ = env_int("DPX_STEP_REPORT_EVERY", 1).value_or(report_every_);
}

Reducer::~Reducer() {
  if (!report_dir_.empty() && iterations_ > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      add_step_times(/*wait=*/true);  // the steps the device had not passed yet
      write_report();
    } catch (const std::exception&) {
      // A destructor must not throw; the report is a convenience.
    }
  }
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
    const auto first_var = bucket.variables.front();
    if (!options_.expect_sparse_gradient.empty() && options_.expect_sparse_gradient[first_var]) {
      // Note [Sparse buckets]: no buffer, and no view for gradient_as_bucket_view (PyTorch
      // ignores that option for sparse gradients too).
      TORCH_INTERNAL_ASSERT(bucket.variables.size() == 1, "a sparse bucket holds one parameter");
      bucket.sparse = true;
      locators_[first_var] = {b, 0};
      continue;
    }
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
  for (std::size_t b = 0; b < buckets_.size(); ++b) describe_bucket(b);
  reset_iteration();
}

// What the stall inspector and the timeline say about a bucket. The log line names at most
// kNamed parameters (a bucket of a large model holds hundreds); the timeline keeps them all.
void Reducer::describe_bucket(std::size_t b) {
  constexpr std::size_t kNamed = 8;
  auto& bucket = buckets_[b];
  const auto bytes = bucket.sparse ? 0 : bucket.buffer.numel() * bucket.buffer.element_size();
  std::string names;
  nlohmann::json params = nlohmann::json::array();
  for (std::size_t i = 0; i < bucket.variables.size(); ++i) {
    const auto& name = names_[bucket.variables[i]];
    params.push_back(name);
    if (i < kNamed) names += (i ? ", " : "") + name;
  }
  if (bucket.variables.size() > kNamed) {
    names += " and " + std::to_string(bucket.variables.size() - kNamed) + " more";
  }
  bucket.label = std::make_shared<const std::string>(
      "DDP bucket " + std::to_string(b) + " of " + std::to_string(buckets_.size()) + ", " +
      (bucket.sparse ? std::string("sparse gradient") : std::to_string(bytes) + " bytes") +
      ": " + names);
  nlohmann::json args = {{"bucket", b}, {"bytes", bytes}, {"params", std::move(params)}};
  if (bucket.sparse) args["sparse"] = true;
  bucket.trace_args = std::make_shared<const std::string>(args.dump());
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
      params_, {options_.first_bucket_bytes, options_.bucket_bytes},
      options_.expect_sparse_gradient, indices);
  initialize_buckets(assignment.buckets);
  observed_order_.clear();
}

void Reducer::register_comm_hook(std::any state, CommHook hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_CHECK(!has_hook_, pg_->where(), "register_comm_hook or register_builtin_comm_hook can "
              "only be called once.");
  TORCH_CHECK(hook, pg_->where(), "register_comm_hook: the hook is empty");
  // PyTorch hands a sparse gradient to the hook as the bucket's buffer; dpx's GradBucket is a
  // flat dense buffer, so hooks and sparse gradients do not mix (docs/ddp.md).
  const auto sparse = sparse_parameter_names();
  TORCH_CHECK(sparse.empty(), pg_->where(), "register_comm_hook: this model has parameters with "
              "sparse gradients (", sparse, ": an Embedding or EmbeddingBag built with "
              "sparse(true)), and comm hooks receive dense buckets only. Build those modules "
              "with sparse(false) to use a comm hook, or keep the default reduction.");
  hook_state_ = std::move(state);
  hook_ = std::move(hook);
  has_hook_ = true;
}

std::string Reducer::sparse_parameter_names() const {
  std::vector<std::size_t> sparse;
  for (const auto& bucket : buckets_) {
    if (bucket.sparse) sparse.push_back(bucket.variables.front());
  }
  return names_of(sparse);
}

DdpStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  add_step_times(/*wait=*/true);
  return stats_locked();
}

DdpStats Reducer::stats_locked() const {
  DdpStats s = last_;
  s.bucket_sizes_bytes.clear();
  s.bucket_num_parameters.clear();
  for (const auto& bucket : buckets_) {
    s.bucket_sizes_bytes.push_back(
        bucket.sparse ? 0 : bucket.buffer.numel() * bucket.buffer.element_size());
    s.bucket_num_parameters.push_back(bucket.variables.size());
  }
  s.iterations = iterations_;
  s.buckets_rebuilt = rebuilt_;
  if (steps_timed_ > 0) {
    const double n = static_cast<double>(steps_timed_);
    s.avg_forward_ms = totals_.forward_ms / n;
    s.avg_backward_compute_ms = totals_.backward_compute_ms / n;
    s.avg_backward_comm_ms = totals_.backward_comm_ms / n;
    s.avg_exposed_comm_ms = totals_.exposed_comm_ms / n;
    s.avg_overlap_ms = totals_.overlap_ms / n;
  }
  s.rank = pg_->rank();
  s.world_size = pg_->size();
  s.backend = pg_->backend();
  s.num_parameter_tensors = static_cast<std::int64_t>(params_.size());
  s.total_parameter_size_bytes = 0;
  for (const auto& p : params_) s.total_parameter_size_bytes += p.numel() * p.element_size();
  s.bucket_cap_bytes = static_cast<std::int64_t>(options_.bucket_bytes);
  s.find_unused_parameters = options_.find_unused_parameters;
  s.gradient_as_bucket_view = options_.gradient_as_bucket_view;
  s.static_graph = options_.static_graph;
  s.comm_hook = has_hook_;
  return s;
}

// Note [Step report]. A report that cannot be written is a warning: training goes on.
void Reducer::write_report() const {
  const std::string path = report_dir_ + "/rank" + std::to_string(pg_->rank()) + ".json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << to_json(stats_locked()) << "\n";
    if (!out.good()) {
      TORCH_WARN_ONCE(pg_->where(), "cannot write the step report ", tmp);
      return;
    }
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace dpx::detail
