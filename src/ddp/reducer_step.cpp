// One DDP backward as the Reducer sees it, top to bottom (Note [Reducer iteration] in
// reducer.h, steps 3 and 4): the gradient hooks (registered here, fired by autograd) fill the
// buckets, full buckets launch in order, and the end-of-backward callback waits for them and
// writes the averages into .grad. Beside it: what comes before a backward (reducer_forward.cpp),
// what happens once (reducer.cpp), what a step reports (reducer_report.cpp) and the
// texts of its errors (reducer_errors.cpp).
#include "ddp/reducer.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "dpx/errors.h"
#include "ddp/sparse_reduce.h"
#include "runtime/compat/torch_version.h"

namespace dpx::detail {
namespace {

// A gradient's share of the average, as PyTorch's reducer computes it: a copied gradient times
// 1/world, one already in its bucket divided in place; in the kernels' compute type (float for
// bfloat16 and float16), never with 1/world rounded to the gradient's dtype (bf16(1/3) is 0.2%
// off). A wrapped number (a Python scalar, to type promotion) keeps the multiply one kernel in
// the gradient's dtype that computes in float. LibTorch 1.13 casts a scalar operand to a bf16
// tensor's dtype, so there reduced precision goes through a float copy.
void average_into(at::Tensor& out, const at::Tensor& in, double divisor) {
  const bool in_place = in.is_same(out);
  const bool reduced = in.scalar_type() == at::kBFloat16 || in.scalar_type() == at::kHalf;
  if (reduced && compat::kTorchVersion < 200) {
    auto f = in.to(at::kFloat);
    out.copy_(in_place ? f.div_(divisor) : f.mul_(1.0 / divisor));
  } else if (in_place) {
    out.div_(divisor);
  } else {
    auto factor = at::scalar_tensor(1.0 / divisor, at::kDouble);
    factor.unsafeGetTensorImpl()->set_wrapped_number(true);
    at::mul_out(out, in, factor);
  }
}

// Runs after autograd has accumulated a parameter's gradient (DESIGN: the accumulator's
// post-hook, kept alive by the Reducer's references to the accumulators).
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

void Reducer::install_hooks() {
  accumulators_.resize(params_.size());
  hook_keys_.resize(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) hook(i);
}

void Reducer::hook(std::size_t i) {
  hook(i, torch::autograd::impl::grad_accumulator(params_[i]));
}

void Reducer::hook(std::size_t i, compat::NodePtr acc) {
  TORCH_INTERNAL_ASSERT(acc, "parameter ", names_[i], " has no gradient accumulator");
  hook_keys_[i] = acc->add_post_hook(std::make_unique<ReadyHook>([this, i] { autograd_hook(i); }));
  accumulators_[i] = std::move(acc);
}

// Note [Replaced gradient accumulators]
// A parameter's gradient accumulator, the autograd node DDP hooks to learn that its gradient
// is ready, is kept by the parameter only weakly, and some operations on the parameter make it
// forget it: LibTorch's own Module::load (torch::load(model, file)) gives each parameter the
// file's storage with set_(), after which the next forward makes a new accumulator. DDP's hooks
// stayed on the old one, never fired again, and every rank stepped with its own gradient: the
// replicas drifted apart without an error. So before each forward (synchronised or under
// no_sync, whose hooks mark parameters used), every parameter's accumulator is asked for (made
// if it was forgotten, so the forward's graph uses the one hooked) and compared with the
// hooked one; a new one is hooked (one lookup per parameter).
void Reducer::rehook_replaced_accumulators() {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto now = torch::autograd::impl::grad_accumulator(params_[i]);
    if (now.get() == accumulators_[i].get()) continue;
    accumulators_[i]->del_post_hook(hook_keys_[i]);
    hook(i, std::move(now));
  }
}

void Reducer::autograd_hook(std::size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == ReducerState::kIdle) {
    // Note [Used under no_sync]
    // A parameter that got a gradient under no_sync counts as used at the next synchronised
    // step, as in PyTorch (its used map is kept from one reduction to the next): that step
    // reduces the accumulated gradient even where this rank's last forward skipped it.
    if (options_.find_unused_parameters && !options_.static_graph &&
        params_[index].grad().defined()) {
      local_used_.data_ptr<int>()[index] = 1;
    }
    return;  // no_sync, evaluation, or a backward not preceded by a DDP forward: stay local
  }
  const bool static_first = options_.static_graph && iterations_ == 0;
  if (state_ == ReducerState::kAwaitingGradients) {
    state_ = ReducerState::kReducing;
    if (static_first) {
      // Note [Static graph, first iteration]
      // Hooks may fire several times per parameter (reentrant backward), so nothing is reduced
      // until backward ends; the counts are learnt.
      torch::autograd::Engine::get_default_engine().queue_callback(
          [this] { delayed_reduce_all(); });
    } else {
      for (auto u : unused_) mark_variable_ready(u);
    }
  }
  if (++hook_count_[index] == 1 && iterations_ == 0) {
    observed_order_.push_back(index);
  }
  if (reduces_used_map()) {
    local_used_.data_ptr<int>()[index] = 1;
  }
  if (static_first) {
    return;
  }
  if (options_.static_graph) {
    TORCH_CHECK(hook_count_[index] <= expected_hooks_[index], pg_->where(),
                graph_changed_message(index));
    if (hook_count_[index] == expected_hooks_[index]) mark_variable_ready(index);
    return;
  }
  TORCH_CHECK(!marked_[index], pg_->where(), marked_twice_message(index));
  mark_variable_ready(index);
}

void Reducer::mark_variable_ready(std::size_t index) {
  marked_[index] = 1;
  copy_grad_to_bucket(index);
  auto& bucket = buckets_[locators_[index].bucket];
  TORCH_INTERNAL_ASSERT(bucket.pending > 0, "bucket of variable ", index, " already complete");
  if (--bucket.pending == 0) {
    launch_ready_buckets();
  }
}

// Note [One rank]
// With a single rank, no hook and no bucket views, the average is the local gradient itself, so it
// is neither copied into the bucket nor back (bit-identical result).
bool Reducer::passthrough() const {
  return pg_->size() == 1 && !has_hook_ && !options_.gradient_as_bucket_view;
}

void Reducer::copy_grad_to_bucket(std::size_t index) {
  const auto& loc = locators_[index];
  if (buckets_[loc.bucket].sparse) {
    take_sparse_grad(index, buckets_[loc.bucket]);
    return;
  }
  if (passthrough()) return;
  at::NoGradGuard no_grad;
  auto& view = buckets_[loc.bucket].views[loc.slot];
  auto& grad = params_[index].mutable_grad();
  const double divisor = has_hook_ ? 1.0 : div_factor_;
  TORCH_CHECK(!grad.defined() || !grad.is_sparse(), pg_->where(), "parameter ", names_[index],
              " has a sparse gradient, but it is not the weight of a torch::nn::Embedding or "
              "EmbeddingBag built with sparse(true), the parameters whose sparse gradients DDP "
              "reduces (as PyTorch's); compute it with sparse = false, or through such a module");
  if (!grad.defined()) {
    view.zero_();
  } else if (grad.is_alias_of(view)) {
    if (divisor != 1.0) average_into(view, view, divisor);
  } else {
    TORCH_CHECK(grad.sizes() == view.sizes() && grad.scalar_type() == view.scalar_type(),
                pg_->where(), "the gradient of parameter ", names_[index], " has sizes ",
                grad.sizes(), " and dtype ", grad.scalar_type(), ", but the parameter has ",
                view.sizes(), " and ", view.scalar_type());
    if (divisor != 1.0) {
      average_into(view, grad, divisor);
    } else {
      view.copy_(grad);
    }
    if (options_.gradient_as_bucket_view) grad = view;
  }
}

// This rank's contribution to a sparse bucket (Note [Sparse buckets]) is its gradient coalesced
// (an accumulation under no_sync may hold repeated rows) and divided, as PyTorch divides it
// before reducing. No gradient (unused here, with find_unused_parameters) contributes nothing.
void Reducer::take_sparse_grad(std::size_t index, Bucket& bucket) {
  at::NoGradGuard no_grad;
  const auto& grad = params_[index].grad();
  if (!grad.defined()) {
    bucket.sparse_grad = at::Tensor();
    return;
  }
  TORCH_CHECK(grad.is_sparse(), pg_->where(), "parameter ", names_[index], " belongs to an "
              "Embedding or EmbeddingBag built with sparse(true), but its gradient is dense (is "
              "the weight also used outside that module, e.g. tied to an output layer?). DDP "
              "reduces it as a sparse gradient: build the module with sparse(false) instead");
  bucket.sparse_grad = grad.coalesce();
  if (div_factor_ != 1.0) bucket.sparse_grad = bucket.sparse_grad.div(div_factor_);
}

void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    launch_bucket(next_bucket_++);
  }
  if (next_bucket_ < buckets_.size()) return;
  times_.mark(Moment::kLastReady);
  state_ = ReducerState::kAllLaunched;
  if (reduces_used_map()) launch_used_map();
  if (!(options_.static_graph && iterations_ == 0)) {  // the delayed path finalises itself
    torch::autograd::Engine::get_default_engine().queue_callback([this] { finalize_backward(); });
  }
}

void Reducer::launch_bucket(std::size_t b) {
  auto& bucket = buckets_[b];
  bucket.launched = b == 0 ? times_.mark(Moment::kFirstLaunch) : Clock::now();
  const CollectiveLabel label(bucket.label);  // Note [Stall inspector]
  if (bucket.sparse) {
    const auto& param = params_[bucket.variables.front()];
    bucket.future = pg_->size() == 1
                        ? Future::ready(bucket.sparse_grad)
                        : reduce_sparse(pg_, bucket.sparse_grad, param, bucket.label);
  } else if (has_hook_) {
    GradBucket gb;
    gb.index = b;
    gb.is_last = b + 1 == buckets_.size();
    gb.buffer = bucket.buffer;
    for (auto v : bucket.variables) gb.parameters.push_back(params_[v]);
    gb.gradients = bucket.views;
    gb.process_group = pg_;
    bucket.future = hook_(hook_state_, gb);
    TORCH_CHECK(bucket.future, pg_->where(), "the comm hook returned no future for bucket ", b);
  } else if (pg_->size() == 1) {
    bucket.future = Future::ready(bucket.buffer);  // the sum over one rank is the buffer itself
  } else {
    bucket.work = pg_->allreduce(bucket.buffer);
    bucket.future = Future::from_work(bucket.work, bucket.buffer);
  }
}

// Note [Used map]
// With find_unused_parameters (and in a static graph's first iteration) the ranks add up which
// parameters each one used. On a CPU group the map is reduced in place. On a device group it
// goes to the device as PyTorch's reducer sends it: through a fresh pinned copy, without a host
// wait (the caching host allocator keeps that copy until the transfer is done, so the map may be
// cleared meanwhile), and it is read back, a host wait, only when some parameter went unused on
// this rank: one used here is used, whatever the other ranks say.
void Reducer::launch_used_map() {
  if (pg_->options().device.is_cpu()) {
    used_work_ = pg_->allreduce(local_used_);
    return;
  }
  auto pinned = at::empty(local_used_.sizes(), local_used_.options().pinned_memory(true));
  pinned.copy_(local_used_);
  used_on_device_ = pinned.to(pg_->options().device, /*non_blocking=*/true);
  used_work_ = pg_->allreduce(used_on_device_);
}

// Sets globally_unused_ from the reduced used map and clears this rank's for the next step.
void Reducer::read_used_map() {
  const int* here = local_used_.data_ptr<int>();
  const bool all_used_here =
      std::all_of(here, here + params_.size(), [](int used) { return used != 0; });
  if (all_used_here) {
    used_work_->synchronize();  // nothing to read back: ordered only (a wait on a CPU group)
    std::fill(globally_unused_.begin(), globally_unused_.end(), 0);
  } else {
    used_work_->wait();
    const at::Tensor reduced = used_on_device_.defined() ? used_on_device_.cpu() : local_used_;
    const int* used = reduced.data_ptr<int>();
    for (std::size_t i = 0; i < params_.size(); ++i) globally_unused_[i] = used[i] == 0;
  }
  used_work_.reset();
  local_used_.zero_();  // Note [Used under no_sync]: marks live until a reduction reads them
}

void Reducer::delayed_reduce_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!marked_[i]) mark_variable_ready(i);
    }
  }
  finalize_backward();
}

void Reducer::finalize_backward() {
  std::lock_guard<std::mutex> lock(mutex_);
  TORCH_INTERNAL_ASSERT(state_ == ReducerState::kAllLaunched, "finalize in state ",
                        static_cast<int>(state_));
  times_.mark(Moment::kWaitStart);
  // Without the used map every bucket's result is final once it arrives, so it is written into
  // .grad at once, while later buckets are still being reduced.
  const bool write_each = !used_work_;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = buckets_[b];
    at::Tensor result = bucket.future->wait();
    if (bucket.sparse) {
      bucket.sparse_grad = result;
    } else if (!result.is_same(bucket.buffer)) {
      TORCH_CHECK(result.numel() == bucket.buffer.numel(), pg_->where(),
                  "the comm hook's future holds ", result.numel(), " elements, but the bucket "
                  "has ", bucket.buffer.numel());
      bucket.buffer.copy_(result.view(bucket.buffer.sizes()));
    }
    bucket.future.reset();
    if (write_each) write_results(b);
  }
  if (used_work_) {
    read_used_map();
    for (std::size_t b = 0; b < buckets_.size(); ++b) write_results(b);
  }
  times_.mark(Moment::kEnd);
  record_step();
  for (auto& bucket : buckets_) bucket.work.reset();
  if (options_.static_graph && iterations_ == 0) {
    expected_hooks_ = hook_count_;
  }
  ++iterations_;
  state_ = ReducerState::kIdle;
  if (!report_dir_.empty() && iterations_ % report_every_ == 0) write_report();
}

void Reducer::write_results(std::size_t bucket) {
  if (buckets_[bucket].sparse) {
    // The reduced sparse tensor becomes .grad, as PyTorch leaves it (Note [Sparse buckets]).
    const auto i = buckets_[bucket].variables.front();
    if (!globally_unused_[i]) params_[i].mutable_grad() = buckets_[bucket].sparse_grad;
    buckets_[bucket].sparse_grad.reset();
    return;
  }
  if (passthrough()) return;
  at::NoGradGuard no_grad;
  for (std::size_t i : buckets_[bucket].variables) {
    if (globally_unused_[i]) continue;  // unused on every rank: .grad stays as it was
    const auto& loc = locators_[i];
    auto& view = buckets_[loc.bucket].views[loc.slot];
    auto& grad = params_[i].mutable_grad();
    if (options_.gradient_as_bucket_view) {
      if (!grad.defined() || !grad.is_alias_of(view)) grad = view;
    } else if (!grad.defined()) {
      grad = view.clone();
    } else {
      grad.copy_(view);
    }
  }
}

}  // namespace dpx::detail
