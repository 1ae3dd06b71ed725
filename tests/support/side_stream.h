// For the CUDA tests that call dpx from a non-default stream: a stream of c10's pool, and input
// that lands on that stream only after tens of milliseconds of queued work, so that whatever
// reads it without being ordered after that stream reads what was there before (NaN). All
// through c10's device-agnostic guard: these tests build against LibTorch without CUDA too.
#pragma once

#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <limits>

namespace dpx::test {

// A stream of `device` other than its default stream (c10's pool).
inline c10::Stream side_stream(at::Device device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStreamFromGlobalPool(device);
}

// `values` (a floating-point CPU tensor) on `device`, written by the current stream after a
// chain of large matrix products (tens of milliseconds on any GPU), into memory that held NaN
// until then. The host does not wait: it returns long before the values are there.
inline torch::Tensor arrives_late(const torch::Tensor& values, at::Device device) {
  TORCH_CHECK(values.is_floating_point(), "arrives_late: NaN marks what is not there yet");
  auto staged = values.to(device);
  auto target = torch::full_like(staged, std::numeric_limits<double>::quiet_NaN());
  auto busy = torch::randn({4096, 4096}, torch::TensorOptions().device(device));
  torch::cuda::synchronize(device.index());  // all three ready before the current stream starts
  for (int i = 0; i < 32; ++i) busy = torch::tanh(torch::mm(busy, busy));
  target.copy_(staged);  // queued behind the chain
  return target;
}

}  // namespace dpx::test
