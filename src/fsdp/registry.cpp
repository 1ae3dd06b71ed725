#include "fsdp/registry.h"

#include "fsdp/fsdp_unit.h"

#include <unistd.h>

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
  units_[module.get()] = Entry{module, unit, static_cast<int>(::getpid())};
  for (const auto& p : unit->params()) holders_[p.param().unsafeGetTensorImpl()] = unit;
}

// Note [Units across fork]
// A process forked from one that trained with fully_shard (a launcher's spawn, a test's ranks)
// inherits this registry, with the units of models that died in the parent but were not pruned
// yet, and their process groups. Those groups' threads did not come with the fork: destroying
// them here would join threads that do not exist, and hang. So a unit made by another process
// is let go without being destroyed (its memory is the parent's copy; nothing in this process
// uses it).
void UnitRegistry::prune_locked() {
  const int pid = static_cast<int>(::getpid());
  for (auto it = units_.begin(); it != units_.end();) {
    if (!it->second.module.expired()) {
      ++it;
      continue;
    }
    if (it->second.pid != pid) (void)new std::shared_ptr<FsdpUnit>(std::move(it->second.unit));
    it = units_.erase(it);
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
