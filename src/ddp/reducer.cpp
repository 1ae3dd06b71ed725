// What the Reducer does once, or once in a while: construction (bucket assignment, then the
// gradient hooks of reducer_step.cpp), the one-time bucket rebuild after the first iteration
// (Note [Bucket rebuild]) and the comm hook's registration. What it does in every step is in
// reducer_forward.cpp and reducer_step.cpp, in the order a step runs.
#include "ddp/reducer.h"

#include <algorithm>
#include <c10/util/strides.h>

#include "dpx/ddp/bucket_assignment.h"
#include "comm/coordination/control.h"
#include "comm/shared_memory.h"
#include "runtime/env_read.h"

namespace dpx::detail {

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

namespace {

constexpr std::size_t kSharedAlign = 64;  // Note [Shared buckets]: offsets in 64-byte lines

std::size_t aligned_bytes(std::int64_t numel, const at::TensorOptions& options) {
  const std::size_t n = numel * options.dtype().itemsize();
  return (n + kSharedAlign - 1) / kSharedAlign * kSharedAlign;
}

}  // namespace

// Note [Shared buckets] (comm/shared_memory.h): where the group offers memory every rank reaches,
// the dense buckets are laid out in it one after the other, in bucket order, so that every rank's
// bucket b lies at the same offset. Otherwise (another backend, CUDA tensors, one rank) each
// bucket is a tensor of its own.
std::vector<at::Tensor> Reducer::allocate_bucket_buffers(
    const std::vector<std::vector<std::size_t>>& assignment) const {
  const std::size_t n = assignment.size();
  std::vector<std::int64_t> numel(n, -1);  // -1: a sparse bucket, no buffer
  std::vector<at::TensorOptions> options(n);
  bool all_cpu = true;
  std::size_t bytes = 0;
  for (std::size_t b = 0; b < n; ++b) {
    if (is_sparse_bucket(assignment[b])) continue;
    numel[b] = 0;
    for (auto v : assignment[b]) {
      numel[b] += params_[v].numel();
      all_cpu = all_cpu && params_[v].is_cpu();
    }
    options[b] = params_[assignment[b].front()].options().requires_grad(false);
    bytes += aligned_bytes(numel[b], options[b]);
  }
  at::Tensor memory;
  if (auto* shared = dynamic_cast<SharedMemory*>(pg_.get()); shared && all_cpu && bytes > 0) {
    memory = shared->allocate_shared(bytes);
  }
  std::vector<at::Tensor> flats(n);
  std::size_t offset = 0;
  for (std::size_t b = 0; b < n; ++b) {
    if (numel[b] < 0) continue;
    if (!memory.defined()) {
      flats[b] = at::zeros({numel[b]}, options[b]);
      continue;
    }
    // The bucket keeps the shared memory alive (its deleter holds `memory`).
    flats[b] = at::from_blob(static_cast<char*>(memory.data_ptr()) + offset, {numel[b]},
                             [memory](void*) {}, options[b]);
    flats[b].zero_();
    offset += aligned_bytes(numel[b], options[b]);
  }
  return flats;
}

bool Reducer::is_sparse_bucket(const std::vector<std::size_t>& variables) const {
  return !options_.expect_sparse_gradient.empty() &&
         options_.expect_sparse_gradient[variables.front()];
}

void Reducer::initialize_buckets(const std::vector<std::vector<std::size_t>>& assignment) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flats = allocate_bucket_buffers(assignment);
  buckets_.clear();
  buckets_.resize(assignment.size());
  locators_.assign(params_.size(), {});
  for (std::size_t b = 0; b < assignment.size(); ++b) {
    auto& bucket = buckets_[b];
    bucket.variables = assignment[b];
    const auto first_var = bucket.variables.front();
    if (is_sparse_bucket(bucket.variables)) {
      // No buffer, and no view for gradient_as_bucket_view (PyTorch ignores that option for
      // sparse gradients too; Note [Sparse buckets]).
      TORCH_INTERNAL_ASSERT(bucket.variables.size() == 1, "a sparse bucket holds one parameter");
      bucket.sparse = true;
      locators_[first_var] = {b, 0};
      continue;
    }
    bucket.buffer = flats[b];
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

bool Reducer::rebuild_due() const {
  return !rebuilt_ && iterations_ >= 1 &&
         (options_.static_graph || !options_.find_unused_parameters);
}

// Note [Bucket rebuild]
// After the first iteration the buckets are laid out again in the order the gradients became ready,
// so that each bucket fills in one go. Ranks may observe different orders; rank 0's is broadcast,
// as the layout must be identical everywhere.
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

}  // namespace dpx::detail
