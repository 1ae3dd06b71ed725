#include "dpx/amp/grad_scaler.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>

namespace dpx {
namespace {

// 1 when any of `grads` holds an inf or nan, else 0 (float, on the gradients' device: no sync).
at::Tensor any_non_finite(const std::vector<at::Tensor>& grads, const at::Tensor& zero) {
  at::Tensor found = zero;
  for (const auto& g : grads) found = at::maximum(found, at::logical_not(g.isfinite().all()));
  return found.to(at::kFloat);
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
}

at::Tensor GradScaler::scale(const at::Tensor& outputs) {
  if (!options_.enabled) return outputs;
  if (!scale_.defined()) {
    scale_ = at::full({}, options_.init_scale, outputs.options().dtype(at::kFloat));
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
  // As PyTorch: the reciprocal in double, rounded to float, then one float multiply per value.
  const auto inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  std::vector<at::Tensor> grads;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      at::Tensor g = p.grad();
      if (!g.defined()) continue;
      TORCH_CHECK(g.scalar_type() != at::kHalf, "Attempting to unscale FP16 gradients.");
      if (g.is_sparse()) g = g._values();
      g.mul_(inv_scale.to(g.device()));
      grads.push_back(g);
    }
  }
  at::Tensor found = any_non_finite(grads, at::zeros({}, scale_.options().dtype(at::kBool)));
  if (group_) {  // Note [GradScaler across ranks]
    auto flag = found.reshape({1}).to(group_->options().device).clone();
    group_->allreduce(flag, {ReduceOp::kMax})->synchronize();
    found = flag.reshape({}).to(found.device());
  }
  state.found_inf = found;
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
  const bool stepped = state.found_inf.item<float>() == 0.0f;
  if (stepped) optimizer.step();
  state.stage = Stage::kStepped;
  return stepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_started("update");
  bool found = false, recorded = false;
  for (const auto& [opt, state] : per_optimizer_) {
    if (!state.found_inf.defined()) continue;
    recorded = true;
    found = found || state.found_inf.item<float>() != 0.0f;
  }
  TORCH_CHECK(recorded, "No inf checks were recorded prior to update.");
  // As PyTorch's _amp_update_scale_: float scale times double factor, rounded to float; a
  // growth that would overflow to inf keeps the old scale.
  const float current = scale_.item<float>();
  float next = current;
  if (found) {
    next = static_cast<float>(current * options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (growth_tracker_ + 1 == options_.growth_interval) {
    const float grown = static_cast<float>(current * options_.growth_factor);
    if (std::isfinite(grown)) next = grown;
    growth_tracker_ = 0;
  } else {
    ++growth_tracker_;
  }
  scale_.fill_(next);
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
          growth_tracker_};
}

void GradScaler::load_state_dict(const GradScalerState& state) {
  TORCH_CHECK(options_.enabled, "GradScaler::load_state_dict: this GradScaler is disabled; "
              "enable it to load a saved scale");
  options_.init_scale = state.scale;
  if (scale_.defined()) scale_.fill_(state.scale);
  options_.growth_factor = state.growth_factor;
  options_.backoff_factor = state.backoff_factor;
  options_.growth_interval = state.growth_interval;
  growth_tracker_ = state._growth_tracker;
}

}  // namespace dpx
