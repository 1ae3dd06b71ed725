// What the Reducer tells about its steps: the labels of its buckets (stall inspector, timeline),
// each step on the timeline, the step times and statistics (Note [Step times]), and the
// periodic report (Note [Step report]).
#include "ddp/reducer.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "dpx/observe/timeline.h"

namespace dpx::detail {

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

// What a finished step leaves behind (finalize_backward, after the last bucket's wait): its
// events on the timeline, its times, its unused parameters.
void Reducer::record_step() {
  if (timeline::enabled()) trace_step(times_.host(Moment::kWaitStart), times_.host(Moment::kEnd));
  times_.end_step();
  add_step_times(/*wait=*/false);
  last_.unused_parameters = static_cast<std::int64_t>(unused_.size());
  last_.unused_parameter_bytes = 0;
  for (auto u : unused_) {
    last_.unused_parameter_bytes += params_[u].numel() * params_[u].element_size();
  }
}

// The step on the timeline: backward compute, each bucket from launch to the end of its
// all-reduce (when the backend tells, else when the wait saw it), and the exposed wait.
void Reducer::trace_step(Clock::time_point wait_start, Clock::time_point end) {
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

// The sampled steps whose times can be read now (all of them, waiting, with `wait`) join the
// sums, and the newest becomes the last step's times (Note [Step times]).
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
  s.timed_iterations = steps_timed_;
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
