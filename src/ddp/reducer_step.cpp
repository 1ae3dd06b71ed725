// One DDP step as the Reducer sees it, top to bottom (Note [Reducer iteration] in reducer.h):
// prepare_for_forward, prepare_for_backward, the gradient hooks filling buckets, bucket
// launches, the end-of-backward callback writing the results, then a joined rank's stand-in
// and the errors a step can raise. Construction and the bucket rebuild are in
// reducer_buckets.cpp.
#include "ddp/reducer.h"

#include <torch/csrc/autograd/engine.h>

#include <unordered_set>

#include "dpx/store/errors.h"
#include "comm/coordination/control.h"
#include "ddp/sparse_reduce.h"
#include "dpx/observe/timeline.h"

namespace dpx::detail {
namespace {

// A gradient's share of the average, as PyTorch's reducer computes it: a copied gradient times
// 1/world, one already in its bucket divided in place; in the kernels' compute type (float for
// bfloat16 and float16), never with 1/world rounded to the gradient's dtype (bf16(1/3) is 0.2%
// off). LibTorch 1.13 casts a scalar operand to a bf16 tensor's dtype, so reduced precision goes
// through float explicitly.
void average_into(at::Tensor& out, const at::Tensor& in, double divisor) {
  const bool in_place = in.is_same(out);
  if (in.scalar_type() == at::kBFloat16 || in.scalar_type() == at::kHalf) {
    auto f = in.to(at::kFloat);
    out.copy_(in_place ? f.div_(divisor) : f.mul_(1.0 / divisor));
  } else if (in_place) {
    out.div_(divisor);
  } else {
    at::mul_out(out, in, at::scalar_tensor(1.0 / divisor, at::kDouble));
  }
}

}  // namespace

void Reducer::prepare_for_forward(bool allow_rebuild) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_prior_reduction_finished();
  if (allow_rebuild && rebuild_due()) rebuild_buckets();
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
  local_used_.zero_();
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

void Reducer::autograd_hook(std::size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ == ReducerState::kIdle) {
    return;  // no_sync, evaluation, or a backward not preceded by a DDP forward: stay local
  }
  const bool static_first = options_.static_graph && iterations_ == 0;
  if (state_ == ReducerState::kAwaitingGradients) {
    state_ = ReducerState::kReducing;
    if (static_first) {
      // Note [Static graph, first iteration]: hooks may fire several times per parameter
      // (reentrant backward), so nothing is reduced until backward ends; the counts are learnt.
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
                "Your training graph has changed in this iteration: the gradient hook of "
                "parameter ", index, " (", names_[index], ") fired ", hook_count_[index],
                " times, but ", expected_hooks_[index], " times in the first iteration. "
                "This is not compatible with static_graph set to true.");
    if (hook_count_[index] == expected_hooks_[index]) mark_variable_ready(index);
    return;
  }
  if (marked_[index]) {
    std::string detail;
    if (options_.debug != DebugLevel::kOff) {
      detail = " Parameter at index " + std::to_string(index) + " with name " + names_[index] +
               " has been marked as ready twice. This means that multiple autograd engine "
               "hooks have fired for this particular parameter during this iteration.";
    } else {
      detail = " Parameter at index " + std::to_string(index) + " has been marked as ready "
               "twice. Set DPX_DEBUG (or TORCH_DISTRIBUTED_DEBUG) to INFO or DETAIL to see "
               "its name.";
    }
    TORCH_CHECK(false, pg_->where(), "Expected to mark a variable ready only once. This "
                "happens when 1) a parameter is used outside the forward of the DDP module, "
                "or shared across concurrent forward-backward passes, or 2) the same "
                "parameters take part in several reentrant backward passes (e.g. checkpointing "
                "the same part of the model twice). If the graph does not change across "
                "iterations, static_graph = true is a workaround.", detail);
  }
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

// Note [One rank]: with a single rank, no hook and no bucket views, the average is the local
// gradient itself, so it is neither copied into the bucket nor back (bit-identical result).
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

// Note [Sparse buckets]: this rank's contribution is its gradient coalesced (an accumulation
// under no_sync may hold repeated rows) and divided, as PyTorch divides it before reducing. No
// gradient (unused here, with find_unused_parameters) contributes nothing.
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

void Reducer::launch_used_map() { used_work_ = control_allreduce(*pg_, local_used_); }

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
    used_work_->wait();
    used_work_.reset();
    auto used = local_used_.data_ptr<int>();
    for (std::size_t i = 0; i < params_.size(); ++i) globally_unused_[i] = used[i] == 0;
    for (std::size_t b = 0; b < buckets_.size(); ++b) write_results(b);
  }
  times_.mark(Moment::kEnd);
  if (timeline::enabled()) record_step(times_.host(Moment::kWaitStart), times_.host(Moment::kEnd));
  for (auto& bucket : buckets_) bucket.work.reset();
  times_.end_step();
  add_step_times(/*wait=*/false);
  last_.unused_parameters = static_cast<std::int64_t>(unused_.size());
  last_.unused_parameter_bytes = 0;
  for (auto u : unused_) {
    last_.unused_parameter_bytes += params_[u].numel() * params_[u].element_size();
  }
  if (options_.static_graph && iterations_ == 0) {
    expected_hooks_ = hook_count_;
  }
  ++iterations_;
  state_ = ReducerState::kIdle;
  if (!report_dir_.empty() && iterations_ % report_every_ == 0) write_report();
}

// The step on the timeline: backward compute, each bucket from launch to the end of its
// all-reduce (when the backend tells, else when the wait saw it), and the exposed wait.
void Reducer::record_step(Clock::time_point wait_start, Clock::time_point end) {
  timeline::record("backward", "ddp", times_.host(Moment::kForwardEnd),
                   times_.host(Moment::kLastReady));
  for (auto& bucket : buckets_) {
    auto done = bucket.work ? bucket.work->finished_at() : Clock::time_point{};
    if (done == Clock::time_point{}) done = end;
    timeline::mark("bucket ready", "ddp", bucket.launched, bucket.trace_args);
    timeline::record("allreduce", "comm", bucket.launched, done, bucket.trace_args);
  }
  timeline::record("wait for buckets", "wait", wait_start, end);
}

// Note [Step times]: the steps whose times can be read now (all of them, waiting, with `wait`)
// join the sums, and the newest becomes the last step's times.
void Reducer::add_step_times(bool wait) const {
  for (const auto& d : times_.take(wait)) {
    ++steps_timed_;
    totals_.forward_ms += d.forward_ms;
    totals_.backward_compute_ms += d.backward_compute_ms;
    totals_.backward_comm_ms += d.backward_comm_ms;
    totals_.exposed_comm_ms += d.exposed_comm_ms;
    totals_.overlap_ms += d.overlap_ms;
    last_.forward_ms = d.forward_ms;
    last_.backward_compute_ms = d.backward_compute_ms;
    last_.backward_comm_ms = d.backward_comm_ms;
    last_.exposed_comm_ms = d.exposed_comm_ms;
    last_.overlap_ms = d.overlap_ms;
  }
}

void Reducer::write_results(std::size_t bucket) {
  if (buckets_[bucket].sparse) {
    // Note [Sparse buckets]: the reduced sparse tensor becomes .grad, as PyTorch leaves it.
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
  }
  ++iterations_;
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

std::string Reducer::names_of(const std::vector<std::size_t>& indices) const {
  std::string out;
  for (auto i : indices) out += (out.empty() ? "" : ", ") + names_[i];
  return out;
}

}  // namespace dpx::detail
