// Autocast in C++: the `with torch.autocast(device_type, dtype):` of PyTorch as a scope guard.
// Inside it, LibTorch runs the ops that are safe in lower precision (matrix products,
// convolutions) in `dtype` and keeps the others in float32, on this thread only.
//
//   {
//     dpx::AutocastGuard autocast({.device_type = at::kCPU, .dtype = at::kBFloat16});
//     loss = criterion(ddp->forward(x), y);
//   }
//   scaler.scale(loss).backward();   // backward outside the guard, as in Python
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace dpx {

struct AutocastOptions {
  c10::DeviceType device_type = c10::DeviceType::CPU;  // CPU or CUDA
  // CPU: bfloat16 (PyTorch's default there); CUDA: float16 is PyTorch's default.
  c10::ScalarType dtype = c10::ScalarType::BFloat16;
  bool enabled = true;  // false: the guard turns autocast off inside it (nested regions)
  bool cache_enabled = true;  // keep the lower-precision copies of weights for the region
};

// Saves the thread's autocast state for the device type, sets it from `options`, and restores
// it when destroyed; the cast cache is cleared when the outermost region ends.
class AutocastGuard {
 public:
  explicit AutocastGuard(AutocastOptions options = {});
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastOptions options_;
  bool prev_enabled_;
  c10::ScalarType prev_dtype_;
  bool prev_cache_;
};

}  // namespace dpx
