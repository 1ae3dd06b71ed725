// The calls users make on sharded modules besides forward: FSDPModule's methods (unshard,
// reshard, gradient sync, ...) and clip_grad_norm_ over sharded gradients.
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

#include "dpx/fsdp/fully_shard.h"
#include "fsdp/fsdp_context.h"
#include "fsdp/fsdp_unit.h"
#include "fsdp/registry.h"

namespace dpx {
namespace {

using detail::units_in;

std::shared_ptr<detail::FsdpUnit> unit_or_throw(const torch::nn::Module& module) {
  auto unit = detail::fsdp_unit_of(module);
  TORCH_CHECK(unit, "this ", module.name(), " is not sharded: apply dpx::fully_shard to it first");
  return unit;
}

}  // namespace

void FsdpControl::unshard() {
  auto unit = unit_or_throw(*module_);
  if (!unit->context()) detail::FsdpContext::init_root(unit);
  unit->unshard();
  unit->wait_for_unshard();
}

void FsdpControl::reshard() { unit_or_throw(*module_)->reshard(); }

void FsdpControl::set_requires_gradient_sync(bool requires_gradient_sync, bool recurse) {
  unit_or_throw(*module_);
  for (const auto& unit : units_in(*module_, recurse)) {
    unit->set_requires_gradient_sync(requires_gradient_sync);
  }
}

void FsdpControl::set_reshard_after_forward(bool reshard_after_forward, bool recurse) {
  unit_or_throw(*module_);
  for (const auto& unit : units_in(*module_, recurse)) {
    unit->set_reshard_after_forward(reshard_after_forward);
  }
}

const std::shared_ptr<ProcessGroup>& FsdpControl::process_group() const {
  return unit_or_throw(*module_)->process_group();
}

FsdpControl::NoSyncGuard::NoSyncGuard(std::shared_ptr<torch::nn::Module> module)
    : module_(std::move(module)) {
  FsdpControl(module_).set_requires_gradient_sync(false);
}

FsdpControl::NoSyncGuard::~NoSyncGuard() {
  for (const auto& unit : units_in(*module_, /*recurse=*/true)) {
    unit->set_requires_gradient_sync(true);
  }
}

// As torch.nn.utils.clip_grad_norm_ over FSDP2's sharded gradients: each rank's part of the
// total (the sum of |g|^p over its shards, or their largest |g|) is reduced over the group.
double clip_grad_norm_(const torch::nn::Module& module, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  const auto units = units_in(module, /*recurse=*/true);
  TORCH_CHECK(!units.empty(), "clip_grad_norm_: no module in this ", module.name(),
              " is sharded; torch::nn::utils::clip_grad_norm_ clips unsharded gradients");
  TORCH_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive or infinity, got ",
              norm_type);
  const auto& pg = units.front()->process_group();
  const bool inf = std::isinf(norm_type);
  std::vector<at::Tensor> grads;
  auto part = at::zeros({1}, at::TensorOptions(at::kDouble).device(pg->options().device));
  for (const auto& unit : units) {
    TORCH_CHECK(unit->process_group() == pg, "clip_grad_norm_: the units of this module shard "
                "over different process groups");
    for (const auto& p : unit->params()) {
      const auto& g = p.param().grad();
      if (!g.defined() || g.numel() == 0) continue;  // a rank may hold no rows: inf norm refuses empty
      grads.push_back(g);
      auto norm = at::linalg_vector_norm(g, norm_type).to(at::kDouble);
      part = inf ? at::maximum(part, norm) : part + norm.pow(norm_type);
    }
  }
  pg->allreduce(part, {inf ? ReduceOp::kMax : ReduceOp::kSum})->synchronize();
  const double total = inf ? part.item<double>() : std::pow(part.item<double>(), 1.0 / norm_type);
  TORCH_CHECK(!error_if_nonfinite || std::isfinite(total), "The total norm of order ",
              norm_type, " for gradients from `parameters` is non-finite, so it cannot be "
              "clipped. To disable this error and scale the gradients by the non-finite norm "
              "anyway, set `error_if_nonfinite=False`");
  const double coef = std::min(1.0, max_norm / (total + 1e-6));
  at::NoGradGuard no_grad;
  for (auto& g : grads) g.mul_(coef);
  return total;
}

}  // namespace dpx
