// Points on a device's stream, for the device-agnostic code above: timing (Note [Step times]
// in ddp/step_times.h) and host copies that must not block the caller
// (Note [Staged collectives] in comm/backends/staged/process_group_staged.cpp). CUDA code only
// in stream_mark.cpp, inside #if DPX_WITH_CUDA.
#pragma once

#include <ATen/ATen.h>

#include <memory>

namespace dpx::detail {

// A mark on a device's stream: the device reaches it once the work queued before it has run.
class StreamMark {
 public:
  virtual ~StreamMark() = default;
  // Moves the mark to now on the current stream of its device, as mark_current_stream would
  // make it: a reached mark is reused rather than a new one made (Note [Step times]).
  virtual void record() = 0;
  // Whether the device has reached the mark; never blocks.
  virtual bool reached() = 0;
  // Blocks the calling thread until the device has reached the mark (without a bound: for marks
  // whose work is known to end, as a finished step's).
  virtual void wait_reached() = 0;
  // Milliseconds of device time from `earlier` to this mark; waits for both to be reached.
  virtual double ms_since(StreamMark& earlier) = 0;
};

// A mark on the current stream of `device`, timed; null for the CPU, whose marks are the host
// clock's readings (and in a dpx built without CUDA, whose CUDA groups the host clock times).
std::unique_ptr<StreamMark> mark_current_stream(at::Device device);

// Copies `source` (on any device) into `host`, a CPU tensor of its size and dtype (pinned, for a
// CUDA source), after the work queued so far on the source's current stream, without blocking
// the caller: on CUDA the copy runs on a side stream, and the returned mark is reached when the
// copy has finished. For a CPU source the copy is done when this returns, and the mark is null.
std::unique_ptr<StreamMark> copy_to_host_async(const at::Tensor& source, at::Tensor& host);

}  // namespace dpx::detail
