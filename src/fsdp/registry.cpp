#include "fsdp/registry.h"

#include "fsdp/fsdp_unit.h"

#include <unordered_set>

namespace dpx::detail {

UnitRegistry& UnitRegistry::instance() {
  static auto* registry = new UnitRegistry();  // never destroyed: units may outlive statics
  return *registry;
}

std::shared_ptr<FsdpUnit> UnitRegistry::unit_of(const torch::nn::Module& module) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = units_.find(&module);
  if (it == units_.end()) return nullptr;
  auto alive = it->second.module.lock();
  return alive.get() == &module ? it->second.unit : nullptr;
}

std::shared_ptr<FsdpUnit> UnitRegistry::holder_of(const at::Tensor& param) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = holders_.find(param.unsafeGetTensorImpl());
  return it == holders_.end() ? nullptr : it->second.lock();
}

void UnitRegistry::add(const std::shared_ptr<torch::nn::Module>& module,
                       const std::shared_ptr<FsdpUnit>& unit) {
  std::lock_guard<std::mutex> lock(mutex_);
  prune_locked();
  units_[module.get()] = Entry{module, unit};
  for (const auto& p : unit->params()) holders_[p.param().unsafeGetTensorImpl()] = unit;
}

void UnitRegistry::prune_locked() {
  for (auto it = units_.begin(); it != units_.end();) {
    it = it->second.module.expired() ? units_.erase(it) : std::next(it);
  }
  for (auto it = holders_.begin(); it != holders_.end();) {
    it = it->second.expired() ? holders_.erase(it) : std::next(it);
  }
}

std::vector<std::shared_ptr<FsdpUnit>> units_in(const torch::nn::Module& module, bool recurse) {
  std::vector<std::shared_ptr<FsdpUnit>> units;
  std::unordered_set<FsdpUnit*> seen;
  auto add = [&](const torch::nn::Module& m) {
    auto unit = UnitRegistry::instance().unit_of(m);
    if (unit && seen.insert(unit.get()).second) units.push_back(std::move(unit));
  };
  add(module);
  if (recurse) {
    for (const auto& m : module.modules(/*include_self=*/false)) add(*m);
  }
  return units;
}

}  // namespace dpx::detail
