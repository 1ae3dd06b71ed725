#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "runtime/cuda/local_device.h"
#include "dpx/runtime/cuda.h"
#include "runtime/env_read.h"

namespace dpx {
namespace cuda {

// c10's guard for CUDA asks the driver as torch::cuda::device_count() does; a LibTorch without
// CUDA has no such guard. A test's fake guard answers for the driver (Note [Thread devices]).
int device_count() {
  if (!c10::impl::hasDeviceGuardImpl(at::kCUDA)) return 0;
  return static_cast<int>(c10::impl::getDeviceGuardImpl(at::kCUDA)->deviceCount());
}

at::Device local_device(at::Device asked, std::optional<int> local_rank) {
  if (!local_rank && asked.is_cuda() && !asked.has_index()) {  // LOCAL_RANK only when it decides
    const auto env = detail::env_int("LOCAL_RANK", 0);
    if (env) local_rank = static_cast<int>(*env);
  }
  return detail::resolve_device(asked, local_rank, device_count());
}

void set_current_device(at::Device device) {
  if (!device.is_cuda()) return;
  TORCH_CHECK(device.has_index(), "set_current_device: give cuda:N, not ", device);
  c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
}

}  // namespace cuda

namespace detail {

at::Device resolve_device(at::Device asked, std::optional<int> local_rank, int device_count) {
  if (asked.is_cpu()) return asked;
  TORCH_CHECK(asked.is_cuda(), "device ", asked, " is not supported; use cpu or cuda[:N]");
  TORCH_CHECK(device_count > 0, "device ", asked, " was asked for, but this process sees no CUDA "
              "device (CUDA_VISIBLE_DEVICES, the driver, or a LibTorch without CUDA); use cpu");
  if (asked.has_index()) {
    TORCH_CHECK(asked.index() < device_count, "device ", asked, " does not exist: this process "
                "sees ", device_count, " CUDA device(s), cuda:0 to cuda:", device_count - 1);
    return asked;
  }
  TORCH_CHECK(!local_rank || *local_rank >= 0, "LOCAL_RANK is ", *local_rank,
              "; it must be 0 or more");
  const int index = local_rank ? *local_rank % device_count : 0;
  return at::Device(at::kCUDA, static_cast<at::DeviceIndex>(index));
}

}  // namespace detail
}  // namespace dpx
