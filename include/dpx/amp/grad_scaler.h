// Loss scaling for mixed-precision training, with the semantics of PyTorch's GradScaler
// (torch.amp.GradScaler): the loss is multiplied by a scale before backward so that small
// float16 gradients do not flush to zero; unscale_ divides the gradients back and looks for
// inf/nan; step skips optimizer.step() when it found any; update halves the scale after such a
// step and doubles it after growth_interval steps without one.
//
// Note [GradScaler across ranks]
// Under DDP every rank holds the same averaged gradients, so an inf on one rank reaches all of
// them, as in PyTorch. A rank's own inf can still stay its own: gradients accumulated under
// no_sync, parameters DDP does not reduce, or a ZeRO/local-SGD optimizer. With a process group,
// unscale_ all-reduces the found-inf flag (max, one element: the sum of this rank's devices'
// flags), so every rank skips the same steps and keeps the same scale. Without one, each rank
// decides alone, as PyTorch does.
//
// Note [Unscaling per device]
// As torch.amp.GradScaler, unscale_ keeps a found-inf flag on every device that holds gradients
// and checks each device's gradients there, with the scale's reciprocal copied to it: a model
// spread over several GPUs (or the CPU and a GPU) never mixes devices in one kernel. Per device
// and dtype one fused kernel (at::_amp_foreach_non_finite_check_and_unscale_) looks at every
// value before it multiplies it, so a finite gradient that the multiply would overflow (a scale
// below 1) is not an inf, as in PyTorch. step() adds the flags up on the host; update() adds
// them on the scale's device and reads the sum once.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2**16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() and unscale_() do nothing, step() always steps
};

// What state_dict() holds, under Python's keys (torch.amp.GradScaler.state_dict()).
struct GradScalerState {
  double scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;
  std::int64_t _growth_tracker = 0;
};

class GradScaler {
 public:
  // `group`, when given, makes the ranks agree on inf/nan (Note [GradScaler across ranks]).
  explicit GradScaler(GradScalerOptions options = {},
                      std::shared_ptr<ProcessGroup> group = nullptr);

  // outputs * scale (the scale lives on the device of the first tensor scaled).
  at::Tensor scale(const at::Tensor& outputs);
  std::vector<at::Tensor> scale(const std::vector<at::Tensor>& outputs);

  // Divides `optimizer`'s gradients by the scale in place and records, per device, whether any
  // was inf or nan before the division: one fused kernel per device and dtype. At most once per
  // optimizer between two update()s, and before step().
  void unscale_(torch::optim::Optimizer& optimizer);

  // unscale_ (unless called already), then optimizer.step() unless a gradient was inf or nan.
  // Returns whether the optimizer stepped. Once per optimizer between two update()s.
  bool step(torch::optim::Optimizer& optimizer);

  // The next scale: backoff after an inf/nan in any optimizer's gradients, growth after
  // growth_interval clean steps in a row. Or `new_scale`, as given.
  void update();
  void update(double new_scale);

  double get_scale() const;  // init_scale before the first scale(); 1.0 when disabled
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }
  void set_growth_factor(double f) { options_.growth_factor = f; }
  void set_backoff_factor(double f) { options_.backoff_factor = f; }
  void set_growth_interval(std::int64_t n) { options_.growth_interval = n; }

  // Python's keys and values; load_state_dict restores them (the scale too, before the first
  // scale()). Disabled scalers have nothing to save, and refuse to load.
  GradScalerState state_dict() const;
  void load_state_dict(const GradScalerState& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    // One per device that holds gradients (float, 0-dim, 0 or 1), as torch.amp.GradScaler's
    // found_inf_per_device; with a group, the one flag the ranks agreed on.
    std::vector<at::Tensor> found_inf_per_device;
  };
  void check_started(const char* what) const;

  GradScalerOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  at::Tensor scale_;                  // float32, one element; undefined before scale()
  at::Tensor growth_tracker_;         // int32, one element, on scale_'s device once it exists:
                                      // clean steps in a row since the last change
  std::map<const torch::optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace dpx
