#include "ddp/step_times.h"

#include <algorithm>

namespace dpx::detail {

StepTimes::Clock::time_point StepTimes::start_step(std::int64_t step) {
  give_back_marks(step_);  // a forward whose backward never ran leaves its marks unread
  sampled_ = sampled(step);
  return mark(Moment::kForwardStart);
}

StepTimes::Clock::time_point StepTimes::mark(Moment m) {
  const auto now = Clock::now();
  step_.host[index(m)] = now;
  if (sampled_) {
    auto& d = step_.device[index(m)];
    if (d) free_marks_.push_back(std::move(d));  // marked again: the later moment counts
    d = take_mark();
  }
  return now;
}

void StepTimes::end_step() {
  if (sampled_) ended_.push_back(Step{step_.host, std::move(step_.device)});
  sampled_ = false;  // until the next start_step
}

std::vector<StepDurations> StepTimes::take(bool wait) {
  std::vector<StepDurations> out;
  while (!ended_.empty()) {
    auto& end = ended_.front().device[index(Moment::kEnd)];
    if (!wait && end && !end->reached()) break;
    out.push_back(durations(ended_.front()));
    give_back_marks(ended_.front());
    ended_.pop_front();
  }
  return out;
}

// A mark recorded now: a reached one from the pool, else a new one (null on the CPU).
std::unique_ptr<StreamMark> StepTimes::take_mark() {
  if (free_marks_.empty()) return make_mark_();
  auto m = std::move(free_marks_.back());
  free_marks_.pop_back();
  m->record();
  return m;
}

void StepTimes::give_back_marks(Step& s) {
  for (auto& d : s.device) {
    if (d) free_marks_.push_back(std::move(d));
  }
}

// Device time between two marks where both were made on the device, else host time.
StepDurations StepTimes::durations(Step& s) {
  auto ms = [&s](Moment from, Moment to) {
    auto& a = s.device[index(from)];
    auto& b = s.device[index(to)];
    if (a && b) return b->ms_since(*a);
    return std::chrono::duration<double, std::milli>(s.host[index(to)] - s.host[index(from)])
        .count();
  };
  StepDurations d;
  d.forward_ms = ms(Moment::kForwardStart, Moment::kForwardEnd);
  d.backward_compute_ms = ms(Moment::kForwardEnd, Moment::kLastReady);
  d.backward_comm_ms = ms(Moment::kFirstLaunch, Moment::kEnd);
  d.exposed_comm_ms = std::min(ms(Moment::kWaitStart, Moment::kEnd),
                               ms(Moment::kLastReady, Moment::kEnd));
  d.overlap_ms = std::max(0.0, ms(Moment::kFirstLaunch, Moment::kLastReady));
  return d;
}

}  // namespace dpx::detail
