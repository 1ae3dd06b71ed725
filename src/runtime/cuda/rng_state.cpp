// Device-agnostic: the generators come through ATen's context, which asks LibTorch's CUDA hooks.
#include "runtime/cuda/rng_state.h"

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <mutex>

#include "dpx/runtime/cuda.h"

namespace dpx::detail {
namespace {

// Entry k of a checkpoint's states belongs to this device (Note [CUDA random state]).
at::Device device_of_entry(size_t k, int count) {
  const auto current = c10::impl::getDeviceGuardImpl(at::kCUDA)->getDevice().index();
  return at::Device(at::kCUDA, static_cast<at::DeviceIndex>((current + k) % count));
}

}  // namespace

std::vector<at::Tensor> cuda_rng_states() {
  const int count = cuda::device_count();
  std::vector<at::Tensor> states;
  for (int k = 0; k < count; ++k) {
    at::Generator gen = at::globalContext().defaultGenerator(device_of_entry(k, count));
    std::lock_guard<std::mutex> lock(gen.mutex());
    states.push_back(gen.get_state());
  }
  return states;
}

void set_cuda_rng_states(const std::vector<at::Tensor>& states) {
  const int count = cuda::device_count();
  for (size_t k = 0; k < states.size() && k < static_cast<size_t>(count); ++k) {
    at::Generator gen = at::globalContext().defaultGenerator(device_of_entry(k, count));
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(states[k].cpu());  // a map_location may have moved it
  }
}

}  // namespace dpx::detail
