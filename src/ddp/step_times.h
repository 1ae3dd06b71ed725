// The times of DDP's synchronised steps (DdpStats), from the moments each step marks.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/cuda/stream_mark.h"

namespace dpx::detail {

// Note [Step times]
// DDP times synchronised steps at six moments. On the CPU they are host clock readings. On
// CUDA the host only queues work: its clock tells when a kernel was queued, not when it ran, and
// with stream-ordered waits (Work::synchronize) the host never sees a reduction end. So on a
// CUDA group each moment is also a mark on the current stream (runtime/cuda/stream_mark.h), and
// a step's times come from its marks once the device has passed them: at a later step's end if
// it has (the step never waits for the device), else when the statistics are asked for (which
// waits).
// Only sampled steps are timed, as in PyTorch (its Reducer's should_collect_runtime_stats, with
// kDDPRuntimeLoggingSampleRate 100): the first ten, then every hundredth, so an unsampled step
// makes, records and destroys no event. Host readings are taken at every step (the timeline
// uses them; a clock read is cheap), but only a sampled step makes marks and joins the
// statistics. Its marks come from a pool and return to it once read, so a run makes a few sets
// of marks in all, not six per step.
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

  // The first ten steps and every hundredth are timed; `step` counts from 1.
  static constexpr std::int64_t kSampleRate = 100;
  static bool sampled(std::int64_t step) { return step <= 10 || step % kSampleRate == 0; }

  // Synchronised step number `step` starts: marks its kForwardStart, and the rest of its moments
  // on the device too if it is sampled.
  Clock::time_point start_step(std::int64_t step);
  // `m` is now on the host, and for a sampled step after the work queued so far on the device's
  // current stream.
  Clock::time_point mark(Moment m);
  Clock::time_point host(Moment m) const { return step_.host[index(m)]; }
  // Every moment of this step is marked: a sampled step's times are the next to be read.
  void end_step();
  // The times of the ended steps that can be read without waiting, oldest first; with `wait`,
  // of all of them.
  std::vector<StepDurations> take(bool wait);

 private:
  static constexpr std::size_t kMoments = 6;
  struct Step {
    std::array<Clock::time_point, kMoments> host{};
    std::array<std::unique_ptr<StreamMark>, kMoments> device{};
  };
  static std::size_t index(Moment m) { return static_cast<std::size_t>(m); }
  static StepDurations durations(Step& s);
  std::unique_ptr<StreamMark> take_mark();
  void give_back_marks(Step& s);

  MarkFactory make_mark_;
  Step step_;
  bool sampled_ = false;  // the current step is timed
  std::deque<Step> ended_;  // on CUDA, steps whose marks the device may not have passed yet
  std::vector<std::unique_ptr<StreamMark>> free_marks_;  // read or abandoned: to record again
};

}  // namespace dpx::detail
