#include "dpx/amp/autocast.h"

#include <c10/util/Exception.h>

#include "runtime/compat/autocast_switches.h"

namespace dpx {

// As PyTorch's autocast.__enter__/__exit__: the state of this device type, the cache switch and
// a nesting count, whose return to zero clears the cache of casted weights.
AutocastGuard::AutocastGuard(AutocastOptions options) : options_(options) {
  const auto d = options_.device_type;
  TORCH_CHECK(d == c10::DeviceType::CPU || d == c10::DeviceType::CUDA,
              "AutocastGuard: device_type must be CPU or CUDA, got ", d);
  TORCH_CHECK(d != c10::DeviceType::CPU || options_.dtype == at::kBFloat16 ||
                  options_.dtype == at::kHalf,
              "AutocastGuard: on the CPU autocast runs in bfloat16 or float16, got ",
              options_.dtype);
  TORCH_CHECK(d != c10::DeviceType::CUDA || options_.dtype == at::kBFloat16 ||
                  options_.dtype == at::kHalf,
              "AutocastGuard: on CUDA autocast runs in float16 or bfloat16, got ", options_.dtype);
  prev_enabled_ = compat::autocast_enabled(d);
  prev_dtype_ = compat::autocast_dtype(d);
  prev_cache_ = at::autocast::is_autocast_cache_enabled();
  compat::set_autocast_enabled(d, options_.enabled);
  compat::set_autocast_dtype(d, options_.dtype);
  at::autocast::set_autocast_cache_enabled(options_.cache_enabled);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  compat::set_autocast_enabled(options_.device_type, prev_enabled_);
  compat::set_autocast_dtype(options_.device_type, prev_dtype_);
  at::autocast::set_autocast_cache_enabled(prev_cache_);
}

}  // namespace dpx
