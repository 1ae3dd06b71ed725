// The times of DDP's synchronised steps (DdpStats), from the moments each step marks.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/cuda/stream_mark.h"

namespace dpx::detail {

// Note [Step times]
// DDP times each synchronised step at six moments. On the CPU they are host clock readings. On
// CUDA the host only queues work: its clock tells when a kernel was queued, not when it ran, and
// with stream-ordered waits (Work::synchronize) the host never sees a reduction end. So on a
// CUDA group each moment is also a mark on the current stream (runtime/cuda/stream_mark.h), and
// a step's times come from its marks once the device has passed them: at a later step's end if
// it has (the step never waits for the device), else when the statistics are asked for (which
// waits).
enum class Moment { kForwardStart, kForwardEnd, kFirstLaunch, kLastReady, kWaitStart, kEnd };

struct StepDurations {
  double forward_ms = 0;           // kForwardStart to kForwardEnd
  double backward_compute_ms = 0;  // kForwardEnd to kLastReady
  double backward_comm_ms = 0;     // kFirstLaunch to kEnd
  double exposed_comm_ms = 0;      // the later of kWaitStart and kLastReady, to kEnd
  double overlap_ms = 0;           // kFirstLaunch to kLastReady, or 0
};

class StepTimes {
 public:
  using Clock = std::chrono::steady_clock;

  // Where marks come from: mark_current_stream(device) for DDP; a test may give its own.
  using MarkFactory = std::function<std::unique_ptr<StreamMark>()>;

  explicit StepTimes(at::Device device)
      : StepTimes([device] { return mark_current_stream(device); }) {}
  explicit StepTimes(MarkFactory make_mark) : make_mark_(std::move(make_mark)) {}

  // `m` is now on the host, and after the work queued so far on the device's current stream.
  Clock::time_point mark(Moment m);
  Clock::time_point host(Moment m) const { return step_.host[index(m)]; }
  // Every moment of this step is marked: its times are the next to be read.
  void end_step();
  // The times of the ended steps that can be read without waiting, oldest first; with `wait`,
  // of all of them.
  std::vector<StepDurations> take(bool wait);

 private:
  static constexpr std::size_t kMoments = 6;
  struct Step {
    std::array<Clock::time_point, kMoments> host{};
    std::array<std::shared_ptr<StreamMark>, kMoments> device{};
  };
  static std::size_t index(Moment m) { return static_cast<std::size_t>(m); }
  static StepDurations durations(Step& s);

  MarkFactory make_mark_;
  Step step_;
  std::deque<Step> ended_;  // on CUDA, steps whose marks the device may not have passed yet
};

}  // namespace dpx::detail
