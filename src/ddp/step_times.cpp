#include "ddp/step_times.h"

#include <algorithm>

namespace dpx::detail {

StepTimes::Clock::time_point StepTimes::mark(Moment m) {
  const auto now = Clock::now();
  step_.host[index(m)] = now;
  step_.device[index(m)] = make_mark_();
  return now;
}

void StepTimes::end_step() {
  ended_.push_back(step_);
  for (auto& d : step_.device) d.reset();
}

std::vector<StepDurations> StepTimes::take(bool wait) {
  std::vector<StepDurations> out;
  while (!ended_.empty()) {
    auto& end = ended_.front().device[index(Moment::kEnd)];
    if (!wait && end && !end->reached()) break;
    out.push_back(durations(ended_.front()));
    ended_.pop_front();
  }
  return out;
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
