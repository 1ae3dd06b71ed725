#include "dpx/amp/grad_scaler.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

#include "runtime/compat/amp.h"

namespace dpx {
namespace {

// The gradients of one device and dtype, unscaled together.
struct GradGroup {
  at::Device device;
  at::ScalarType dtype;
  std::vector<at::Tensor> grads;
};

// `optimizer`'s gradients (a sparse one's values) grouped by device, then dtype, in the order
// they first appear.
std::vector<GradGroup> grads_by_device_and_dtype(torch::optim::Optimizer& optimizer) {
  std::vector<GradGroup> groups;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      at::Tensor g = p.grad();
      if (!g.defined()) continue;
      TORCH_CHECK(g.scalar_type() != at::kHalf, "Attempting to unscale FP16 gradients.");
      if (g.is_sparse()) g = g._values();
      auto same = [&](const GradGroup& gg) {
        return gg.device == g.device() && gg.dtype == g.scalar_type();
      };
      auto it = std::find_if(groups.begin(), groups.end(), same);
      if (it == groups.end()) {
        groups.push_back(GradGroup{g.device(), g.scalar_type(), {}});
        it = std::prev(groups.end());
      }
      it->grads.push_back(g);
    }
  }
  return groups;
}

// `t` on `device`, without a host wait where the device's stream orders the copy. Not to the
// CPU: a non-blocking copy from a GPU lands after the host has gone on to read it.
at::Tensor on(const at::Tensor& t, at::Device device) {
  return t.to(device, /*non_blocking=*/device.is_cuda());
}

// The sum of the flags, as one float tensor on `device` (zero when there are none).
at::Tensor combined(const std::vector<at::Tensor>& flags, at::Device device) {
  at::Tensor total = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
  for (const auto& f : flags) total.add_(on(f, device));
  return total;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options, std::shared_ptr<ProcessGroup> group)
    : options_(options), group_(std::move(group)) {
  TORCH_CHECK(options_.init_scale > 0, "GradScaler: init_scale must be positive, got ",
              options_.init_scale);
  TORCH_CHECK(options_.growth_factor > 1.0, "The growth factor must be > 1.0.");
  TORCH_CHECK(options_.backoff_factor < 1.0, "The backoff factor must be < 1.0.");
  TORCH_CHECK(options_.growth_interval > 0, "GradScaler: growth_interval must be positive, got ",
              options_.growth_interval);
  growth_tracker_ = at::zeros({}, at::kInt);
}

at::Tensor GradScaler::scale(const at::Tensor& outputs) {
  if (!options_.enabled) return outputs;
  if (!scale_.defined()) {
    scale_ = at::full({}, options_.init_scale, outputs.options().dtype(at::kFloat));
    growth_tracker_ = growth_tracker_.to(outputs.device());
  }
  return outputs * scale_.to(outputs.device());
}

std::vector<at::Tensor> GradScaler::scale(const std::vector<at::Tensor>& outputs) {
  std::vector<at::Tensor> out;
  out.reserve(outputs.size());
  for (const auto& o : outputs) out.push_back(scale(o));
  return out;
}

void GradScaler::check_started(const char* what) const {
  TORCH_CHECK(scale_.defined(), "Attempted ", what, " but _scale is None.  This may indicate "
              "your script did not use scaler.scale(loss or outputs) earlier in the iteration.");
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_started("unscale_");
  PerOptimizer& state = per_optimizer_[&optimizer];
  TORCH_CHECK(state.stage != Stage::kUnscaled,
              "unscale_() has already been called on this optimizer since the last update().");
  TORCH_CHECK(state.stage != Stage::kStepped, "unscale_() is being called after step().");
  // As PyTorch: the reciprocal in double, rounded to float; then per device a found-inf flag,
  // and one fused check-and-unscale per dtype (Note [Unscaling per device]).
  const auto inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  std::vector<at::Tensor> found_per_device;
  for (auto& group : grads_by_device_and_dtype(optimizer)) {
    at::Tensor* found = nullptr;
    for (auto& f : found_per_device) {
      if (f.device() == group.device) found = &f;
    }
    if (found == nullptr) {
      found_per_device.push_back(
          at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(group.device)));
      found = &found_per_device.back();
    }
    compat::non_finite_check_and_unscale_(group.grads, *found, on(inv_scale, group.device));
  }
  if (group_) {  // Note [GradScaler across ranks]: one flag, from every rank's devices
    auto flag = combined(found_per_device, group_->options().device).reshape({1});
    group_->allreduce(flag, {ReduceOp::kMax})->synchronize();
    found_per_device = {flag.reshape({})};
  }
  state.found_inf_per_device = std::move(found_per_device);
  state.stage = Stage::kUnscaled;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  check_started("step");
  TORCH_CHECK(per_optimizer_[&optimizer].stage != Stage::kStepped,
              "step() has already been called since the last update().");
  if (per_optimizer_[&optimizer].stage == Stage::kReady) unscale_(optimizer);
  PerOptimizer& state = per_optimizer_[&optimizer];
  TORCH_CHECK(!state.found_inf_per_device.empty(),
              "No inf checks were recorded for this optimizer.");  // it has no gradients
  float found = 0.0f;  // as PyTorch: the sum of the devices' flags, read on the host
  for (const auto& f : state.found_inf_per_device) found += f.item<float>();
  const bool stepped = found == 0.0f;
  if (stepped) optimizer.step();
  state.stage = Stage::kStepped;
  return stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_started("update");
  std::vector<at::Tensor> flags;
  for (const auto& [opt, state] : per_optimizer_) {
    flags.insert(flags.end(), state.found_inf_per_device.begin(),
                 state.found_inf_per_device.end());
  }
  TORCH_CHECK(!flags.empty(), "No inf checks were recorded prior to update.");
  // On the scale's device, without a host wait (torch.amp.GradScaler's _amp_update_scale_).
  compat::update_scale_(scale_, growth_tracker_, combined(flags, scale_.device()),
                        options_.growth_factor, options_.backoff_factor, options_.growth_interval);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_started("update");
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : options_.init_scale;
}

GradScalerState GradScaler::state_dict() const {
  TORCH_CHECK(options_.enabled, "GradScaler::state_dict: a disabled GradScaler has no state "
              "(PyTorch returns an empty dict)");
  return {get_scale(), options_.growth_factor, options_.backoff_factor, options_.growth_interval,
          static_cast<std::int64_t>(growth_tracker_.item<int>())};
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  TORCH_CHECK(options_.enabled, "GradScaler::load_state_dict: this GradScaler is disabled; "
              "enable it to load a saved scale");
  options_.init_scale = state.scale;
  if (scale_.defined()) scale_.fill_(state.scale);
  options_.growth_factor = state.growth_factor;
  options_.backoff_factor = state.backoff_factor;
  options_.growth_interval = state.growth_interval;
  growth_tracker_.fill_(state._growth_tracker);
}

}  // namespace dpx
