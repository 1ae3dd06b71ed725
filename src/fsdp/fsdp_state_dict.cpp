#include "dpx/fsdp/fsdp_state_dict.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <map>
#include <unordered_map>

#include "fsdp/fsdp_unit.h"
#include "fsdp/registry.h"

namespace dpx {
namespace {

struct Sharded {
  detail::FsdpParam* param = nullptr;
  detail::FsdpUnit* unit = nullptr;
};

// The sharded parameters of `module`'s units, by TensorImpl.
std::unordered_map<const c10::TensorImpl*, Sharded> sharded_in(const torch::nn::Module& module) {
  std::unordered_map<const c10::TensorImpl*, Sharded> out;
  for (const auto& unit : detail::units_in(module, /*recurse=*/true)) {
    for (auto& p : unit->params()) out[p.param().unsafeGetTensorImpl()] = {&p, unit.get()};
  }
  return out;
}

void check_between_iterations(const Sharded& s, const std::string& name) {
  TORCH_CHECK(!s.param->is_unsharded(), s.unit->process_group()->where(), "parameter '", name,
              "' is unsharded now (inside a forward or backward, or after unshard()): state "
              "dicts are taken and loaded between iterations");
}

at::Tensor gather(const Sharded& s) {
  return detail::gather_rows(*s.unit->process_group(), s.param->padded_shard(),
                             s.param->full_sizes()[0]);
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> full_state_dict(
    const torch::nn::Module& module, const FullStateDictOptions& options) {
  const auto sharded = sharded_in(module);
  const bool keep = !options.rank0_only || sharded.empty() ||
                    sharded.begin()->second.unit->process_group()->rank() == 0;
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::unordered_map<const c10::TensorImpl*, at::Tensor> gathered;  // tied: gathered once
  at::NoGradGuard no_grad;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const auto* impl = item.value().unsafeGetTensorImpl();
    auto it = gathered.find(impl);
    if (it == gathered.end()) {
      auto s = sharded.find(impl);
      at::Tensor whole = item.value().detach();
      if (s != sharded.end()) {
        check_between_iterations(s->second, item.key());
        whole = gather(s->second);
      }
      it = gathered.emplace(impl, whole).first;
    }
    if (keep) out.emplace_back(item.key(), it->second);
  }
  if (!keep) return {};
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    out.emplace_back(b.key(), b.value().detach());
  }
  return out;
}

void load_full_state_dict(torch::nn::Module& module,
                          const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::map<std::string, at::Tensor> given(state.begin(), state.end());
  std::vector<std::pair<std::string, at::Tensor>> targets;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) targets.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) targets.emplace_back(b.key(), b.value());
  std::string missing, unexpected;
  for (const auto& [name, t] : targets) {
    if (!given.erase(name)) missing += (missing.empty() ? "\"" : ", \"") + name + "\"";
  }
  for (const auto& [name, t] : given) unexpected += (unexpected.empty() ? "\"" : ", \"") + name + "\"";
  TORCH_CHECK(missing.empty() && unexpected.empty(), "load_full_state_dict: missing keys: [",
              missing, "], unexpected keys: [", unexpected, "]");
  const auto sharded = sharded_in(module);
  std::map<std::string, at::Tensor> source(state.begin(), state.end());
  at::NoGradGuard no_grad;
  for (auto& [name, target] : targets) {
    const auto& src = source.at(name);
    auto s = sharded.find(target.unsafeGetTensorImpl());
    const auto full = s != sharded.end() ? s->second.param->full_sizes() : target.sizes();
    TORCH_CHECK(src.sizes() == full, "load_full_state_dict: ", name, " has shape ", src.sizes(),
                " in the state dict but ", full, " in the module");
    if (s == sharded.end()) {
      target.copy_(src);
      continue;
    }
    check_between_iterations(s->second, name);
    target.copy_(src.narrow(0, s->second.param->row_offset(), s->second.param->local_rows()));
  }
}

std::vector<ParameterShard> parameter_shards(const torch::nn::Module& module) {
  const auto sharded = sharded_in(module);
  std::vector<ParameterShard> out;
  std::unordered_map<const c10::TensorImpl*, bool> seen;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const auto* impl = item.value().unsafeGetTensorImpl();
    if (!seen.emplace(impl, true).second) continue;
    auto s = sharded.find(impl);
    if (s == sharded.end()) {
      out.push_back({item.key(), item.value(), item.value().sizes().vec(), 0});
      continue;
    }
    check_between_iterations(s->second, item.key());
    out.push_back({item.key(), item.value(), s->second.param->full_sizes().vec(),
                   s->second.param->row_offset(), /*sharded=*/true});
  }
  return out;
}

std::shared_ptr<ProcessGroup> fsdp_process_group(const torch::nn::Module& module) {
  const auto units = detail::units_in(module, /*recurse=*/true);
  return units.empty() ? nullptr : units.front()->process_group();
}

}  // namespace dpx
