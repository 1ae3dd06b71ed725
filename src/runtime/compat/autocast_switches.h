// ATen's autocast switches: one function per device type from LibTorch 2.3 on
// (set_autocast_enabled(DeviceType, bool)), a pair of CPU and GPU functions before.
#pragma once

#include <ATen/autocast_mode.h>

#include "runtime/compat/torch_version.h"

namespace dpx::compat {

inline bool autocast_enabled(c10::DeviceType device) {
#if DPX_TORCH_AT_LEAST(2, 3)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
#endif
}

inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
#if DPX_TORCH_AT_LEAST(2, 3)
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

inline at::ScalarType autocast_dtype(c10::DeviceType device) {
#if DPX_TORCH_AT_LEAST(2, 3)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void set_autocast_dtype(c10::DeviceType device, at::ScalarType dtype) {
#if DPX_TORCH_AT_LEAST(2, 3)
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
}

}  // namespace dpx::compat
