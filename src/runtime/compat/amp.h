// GradScaler's fused kernels: at::_amp_foreach_non_finite_check_and_unscale_ and
// at::_amp_update_scale_ have CUDA kernels in every LibTorch, and CPU ones from 2.3 on (before,
// their CPU dispatch is missing).
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/compat/torch_version.h"

namespace dpx::compat {

// `grads` all on found_inf's device, of one dtype. Sets found_inf (float, 0-dim) to 1 when any
// of them holds an inf or nan, looking at the values before they are multiplied, then
// multiplies each by inv_scale (float, 0-dim, the same device), in place: one fused kernel per
// call, or on the CPU before 2.3 the same check then the same multiply, tensor by tensor.
inline void non_finite_check_and_unscale_(std::vector<at::Tensor>& grads, at::Tensor& found_inf,
                                          const at::Tensor& inv_scale) {
  if (found_inf.is_cuda() || kTorchVersion >= 203) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
    return;
  }
  for (auto& g : grads) {
    found_inf.copy_(at::maximum(found_inf, at::logical_not(g.isfinite().all()).to(at::kFloat)));
    g.mul_(inv_scale);
  }
}

// PyTorch's scale update, in place: after an inf or nan (found_inf, float, 0-dim, not 0) the
// scale (float, 0-dim) times backoff and the tracker (int32, 0-dim, the same device) to 0; else
// the tracker up by one, and at growth_interval the scale times growth, unless that overflows
// to inf, and the tracker to 0. The products are float times double, rounded to float. One
// kernel without a host wait, or on the CPU before 2.3 the same on the host.
inline void update_scale_(at::Tensor& scale, at::Tensor& growth_tracker,
                          const at::Tensor& found_inf, double growth_factor,
                          double backoff_factor, std::int64_t growth_interval) {
  if (scale.is_cuda() || kTorchVersion >= 203) {
    at::_amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                           growth_interval);
    return;
  }
  const float current = scale.item<float>();
  const int tracked = growth_tracker.item<int>();
  if (found_inf.item<float>() != 0.0f) {
    scale.fill_(static_cast<float>(current * backoff_factor));
    growth_tracker.fill_(0);
  } else if (tracked + 1 == growth_interval) {
    const float grown = static_cast<float>(current * growth_factor);
    if (std::isfinite(grown)) scale.fill_(grown);
    growth_tracker.fill_(0);
  } else {
    growth_tracker.fill_(tracked + 1);
  }
}

}  // namespace dpx::compat
