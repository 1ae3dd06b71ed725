// GradScaler's fused check-and-unscale: at::_amp_foreach_non_finite_check_and_unscale_ has a
// CUDA kernel in every LibTorch, and a CPU one from 2.3 on (before, its CPU dispatch is missing).
#pragma once

#include <ATen/ATen.h>

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

}  // namespace dpx::compat
