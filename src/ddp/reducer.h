// The Reducer: averages gradients across ranks bucket by bucket while backward still runs.
//
// Note [Reducer iteration]
// The protocol of one iteration:
//  1. prepare_for_forward(): the previous backward must have finished its reduction; once,
//     after the first iteration, a synchronised forward rebuilds the buckets in the observed
//     gradient order (rank 0's order, broadcast to all; reducer.cpp).
//  2. prepare_for_backward(outputs): expect gradient hooks; with find_unused_parameters (or in
//     the first static-graph iteration) find the parameters the outputs do not reach.
//  3. A hook per parameter fires after its gradient was accumulated: the gradient is copied
//     into its bucket (divided by the divisor), and every complete bucket is launched, strictly
//     in bucket-index order so that all ranks issue the same collectives in the same order.
//  4. After the last bucket launched, an end-of-backward callback waits for all buckets and
//     writes the averages into .grad.
// Steps 1-2 read in this order in reducer_forward.cpp, steps 3-4 (hook, launch, finalize) in
// reducer_step.cpp; what happens once (bucket assignment, rebuild) is in reducer.cpp,
// what a step reports in reducer_report.cpp, the texts of its errors in reducer_errors.cpp.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <any>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/compat/autograd.h"
#include "dpx/comm/process_group.h"
#include "dpx/runtime/env.h"
#include "dpx/ddp/comm_hooks.h"
#include "dpx/ddp/ddp_stats.h"
#include "ddp/step_times.h"

namespace dpx::detail {

// DistributedDataParallelOptions (dpx/ddp/ddp_options.h, where the defaults live) as the
// Reducer needs them: caps in bytes, the debug level already read.
struct ReducerOptions {
  std::size_t bucket_bytes = 0;
  std::size_t first_bucket_bytes = 0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  bool static_graph = false;
  DebugLevel debug = DebugLevel::kOff;
  // Per parameter: its gradient is sparse (an Embedding or EmbeddingBag with sparse(true)), so
  // it gets a bucket of its own (Note [Sparse buckets] in sparse_reduce.h). Empty: none.
  std::vector<bool> expect_sparse_gradient;
};

enum class ReducerState {
  kIdle,              // no backward expected: hooks leave gradients local (no_sync, eval)
  kAwaitingGradients, // a training forward ran; no hook has fired yet
  kReducing,          // hooks are firing; buckets launch as they fill
  kAllLaunched,       // every bucket launched; the end-of-backward callback will finalise
};

class Reducer {
 public:
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> pg, ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  void prepare_for_forward(bool allow_rebuild);
  void prepare_for_backward(const std::vector<at::Tensor>& outputs);
  void register_comm_hook(std::any state, CommHook hook);
  // Gradients are divided by this while copied into buckets (the world size by default).
  void set_divide_factor(double factor) { div_factor_ = factor; }
  // A joined rank's stand-in for one backward: launches every bucket with zeros (and the
  // used-parameter map when the others reduce one) and waits for them.
  void shadow_backward();
  // Whether prepare_for_forward(true) would rebuild the buckets now (a collective).
  bool rebuild_due() const;

  DdpStats stats() const;
  // A synchronised forward starts (Note [Step times]); returns the host's time of it.
  std::chrono::steady_clock::time_point mark_forward_start() {
    std::lock_guard<std::mutex> lock(mutex_);
    return times_.start_step(iterations_ + 1);
  }

 private:
  struct Bucket {
    bool sparse = false;               // one parameter with a sparse gradient; no buffer
    at::Tensor sparse_grad;            // sparse: this rank's contribution, then the result
    at::Tensor buffer;                 // dense: flat, one dtype
    std::vector<std::size_t> variables;
    std::vector<at::Tensor> views;     // of `buffer`, shaped like the variables
    std::size_t pending = 0;           // variables not yet ready in this iteration
    std::shared_ptr<Future> future;
    // "DDP bucket b/n: names" (stall inspector) and its JSON args (timeline).
    std::shared_ptr<const std::string> label, trace_args;
    std::shared_ptr<Work> work;        // the all-reduce without a comm hook (timeline: its end)
    std::chrono::steady_clock::time_point launched;  // host time, for the timeline
  };
  struct Locator {
    std::size_t bucket = 0;
    std::size_t slot = 0;
  };
  using Clock = std::chrono::steady_clock;

  void install_hooks();
  void hook(std::size_t i);  // on the parameter's current gradient accumulator
  void hook(std::size_t i, compat::NodePtr accumulator);
  void rehook_replaced_accumulators();
  void initialize_buckets(const std::vector<std::vector<std::size_t>>& assignment);
  // One zeroed flat tensor per dense bucket of `assignment` (undefined for sparse ones).
  std::vector<at::Tensor> allocate_bucket_buffers(
      const std::vector<std::vector<std::size_t>>& assignment) const;
  bool is_sparse_bucket(const std::vector<std::size_t>& variables) const;
  void rebuild_buckets();
  void reset_iteration();
  void autograd_hook(std::size_t index);
  void mark_variable_ready(std::size_t index);
  void copy_grad_to_bucket(std::size_t index);
  void take_sparse_grad(std::size_t index, Bucket& bucket);
  void launch_ready_buckets();
  void launch_bucket(std::size_t b);
  void launch_used_map();
  void read_used_map();
  void finalize_backward();
  void delayed_reduce_all();
  void write_results(std::size_t bucket);
  std::string sparse_parameter_names() const;
  void check_prior_reduction_finished();
  std::string unfinished_reduction_message() const;
  std::string marked_twice_message(std::size_t index) const;
  std::string graph_changed_message(std::size_t index) const;
  std::vector<std::size_t> find_unused(const std::vector<at::Tensor>& outputs) const;
  bool reduces_used_map() const;
  bool passthrough() const;
  std::string names_of(const std::vector<std::size_t>& indices) const;
  void describe_bucket(std::size_t b);
  DdpStats stats_locked() const;
  void write_report() const;
  void record_step();
  void trace_step(Clock::time_point wait_start, Clock::time_point end);
  void add_step_times(bool wait) const;

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions options_;
  std::vector<compat::NodePtr> accumulators_;  // keep the hooks alive
  std::vector<std::uintptr_t> hook_keys_;

  std::vector<Bucket> buckets_;
  std::vector<Locator> locators_;
  std::size_t next_bucket_ = 0;
  double div_factor_;
  ReducerState state_ = ReducerState::kIdle;

  std::vector<int> hook_count_;        // hooks fired per variable in this iteration
  std::vector<char> marked_;           // variable ready in this iteration
  std::vector<std::size_t> unused_;    // marked ready without a gradient in this iteration
  at::Tensor local_used_;              // int32 per variable, reduced with find_unused
  at::Tensor used_on_device_;          // its reduction on a device group (Note [Used map])
  std::shared_ptr<Work> used_work_;
  std::vector<char> globally_unused_;  // from the last reduced used-parameter map

  // static_graph: learnt in the first iteration
  std::vector<int> expected_hooks_;

  std::vector<std::size_t> observed_order_;  // first iteration, for the rebuild
  bool rebuilt_ = false;
  std::int64_t iterations_ = 0;

  bool has_hook_ = false;
  std::any hook_state_;
  CommHook hook_;

  // Read as the device passes them (Note [Step times]), so stats() (const) may read more.
  mutable StepTimes times_;
  mutable StepDurations totals_;  // sums over the steps read so far
  mutable std::int64_t steps_timed_ = 0;  // how many (the sampled steps): the averages' divisor
  mutable DdpStats last_;  // the last iteration's times and unused parameters
  // Note [Step report]
  // With DPX_STEP_REPORT_DIR set (dpxrun sets it), the statistics are written to <dir>/rank<R>.json
  // every DPX_STEP_REPORT_EVERY iterations and at the end.
  std::string report_dir_;
  std::int64_t report_every_ = 100;
  mutable std::mutex mutex_;
};

}  // namespace dpx::detail
