// c10's FakeGuardImpl as CUDA's device guard, for tests of what dpx does on a CUDA device short of
// launching a kernel or allocating device memory, on any machine: it keeps each thread's current
// device and streams, as CUDA does, and answers for 8 devices.
#pragma once

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/FakeGuardImpl.h>

#include <atomic>

namespace dpx::test {

using FakeCuda = c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>;

// The fake is CUDA's device guard while this lives; then what was there is again (LibTorch's
// own in a CUDA build, none in a CPU one).
class FakeCudaDevices {
 public:
  FakeCudaDevices() : previous_(slot().load()) { slot().store(&fake_); }
  ~FakeCudaDevices() { slot().store(previous_); }
  FakeCudaDevices(const FakeCudaDevices&) = delete;
  FakeCudaDevices& operator=(const FakeCudaDevices&) = delete;

 private:
  static std::atomic<const c10::impl::DeviceGuardImplInterface*>& slot() {
    return c10::impl::device_guard_impl_registry[static_cast<size_t>(c10::DeviceType::CUDA)];
  }
  FakeCuda fake_;
  const c10::impl::DeviceGuardImplInterface* previous_;
};

}  // namespace dpx::test
