#include "fsdp/fsdp_context.h"

#include <torch/csrc/autograd/engine.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "fsdp/registry.h"

namespace dpx::detail {

void FsdpContext::init_root(const std::shared_ptr<FsdpUnit>& root) {
  auto module = root->module();
  TORCH_CHECK(module, "fully_shard: the root's module no longer exists");
  auto ctx = std::make_shared<FsdpContext>();
  root->set_context(ctx, /*root=*/true);
  root->set_name("");
  ctx->units_.push_back(root);
  ctx->root_ = root.get();
  std::unordered_set<FsdpUnit*> seen{root.get()};
  for (const auto& item : module->named_modules("", /*include_self=*/false)) {
    auto unit = UnitRegistry::instance().unit_of(*item.value());
    if (!unit || !seen.insert(unit.get()).second) continue;
    TORCH_CHECK(!unit->context(), root->process_group()->where(), "fully_shard: the unit '",
                item.key(), "' already ran forward as a root of its own; run the first "
                "forward through the root (the module fully_shard was applied to last)");
    unit->set_context(ctx, /*root=*/false);
    unit->set_name(item.key());
    ctx->units_.push_back(unit);
  }
  // Parameters by their names under the root (full state dicts, messages).
  std::unordered_map<const c10::TensorImpl*, std::string> names;
  for (const auto& item : module->named_parameters()) {
    names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  }
  for (const auto& unit : ctx->units()) {
    for (auto& p : unit->params()) {
      auto it = names.find(p.param().unsafeGetTensorImpl());
      if (it != names.end()) p.set_name(it->second);
    }
  }
}

std::vector<std::shared_ptr<FsdpUnit>> FsdpContext::units() const {
  std::vector<std::shared_ptr<FsdpUnit>> out;
  out.reserve(units_.size());
  for (const auto& weak : units_) {
    if (auto unit = weak.lock()) out.push_back(std::move(unit));
  }
  return out;
}

void FsdpContext::start_forward() {
  in_forward_ = true;
  pre_order_.clear();
  pre_cursor_ = 0;
  finish_reductions();  // none unless a backward ended without its callback
}

void FsdpContext::end_forward(bool backward_follows) {
  in_forward_ = false;
  last_pre_order_ = std::move(pre_order_);
  pre_order_.clear();
  for (const auto& unit : units()) {
    if (!backward_follows || !unit->is_unsharded()) unit->reshard();  // prefetched, unused too
  }
  if (!backward_follows) post_order_.clear();
}

std::string FsdpContext::sharded_units_not_called() const {
  std::string out;
  for (const auto& unit : units()) {
    if (unit->is_root() || unit->is_unsharded()) continue;
    if (std::find(pre_order_.begin(), pre_order_.end(), unit.get()) != pre_order_.end()) continue;
    out += (out.empty() ? "unit '" : ", unit '") + unit->name() + "'";
  }
  return out;
}

void FsdpContext::prefetch_forward(FsdpUnit* unit) {
  pre_order_.push_back(unit);
  if (!root().options().forward_prefetch) return;
  auto it = std::find(last_pre_order_.begin() + std::min(pre_cursor_, last_pre_order_.size()),
                      last_pre_order_.end(), unit);
  if (it == last_pre_order_.end() || it + 1 == last_pre_order_.end()) return;
  pre_cursor_ = (it - last_pre_order_.begin()) + 1;
  FsdpUnit* next = *(it + 1);
  if (next != unit) next->unshard();
}

void FsdpContext::record_forward(FsdpUnit* unit) { post_order_.push_back(unit); }

void FsdpContext::prefetch_backward(FsdpUnit* unit) {
  auto it = std::find(post_order_.rbegin(), post_order_.rend(), unit);
  if (it == post_order_.rend()) return;
  *it = nullptr;  // this forward of the unit is reached; an earlier one may come later
  auto before = std::find_if(it + 1, post_order_.rend(), [](FsdpUnit* u) { return u != nullptr; });
  if (!root().options().backward_prefetch || before == post_order_.rend()) return;
  if ((*before)->state() != TrainingState::kPostBackward) (*before)->unshard();
}

void FsdpContext::backward_started() {
  if (callback_queued_) return;
  callback_queued_ = true;
  std::weak_ptr<FsdpContext> weak = weak_from_this();
  torch::autograd::Engine::get_default_engine().queue_callback([weak] {
    if (auto ctx = weak.lock()) ctx->end_backward();
  });
}

// Note [Unit iteration], step 5.
void FsdpContext::end_backward() {
  callback_queued_ = false;
  const auto units = this->units();
  for (auto it = units.rbegin(); it != units.rend(); ++it) (*it)->post_backward();
  finish_reductions();
  for (const auto& unit : units) unit->set_state(TrainingState::kIdle);
  post_order_.clear();
}

}  // namespace dpx::detail
