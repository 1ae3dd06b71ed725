// The optimizer's state of a sharded module, whole: FSDP2's get_optimizer_state_dict and
// set_optimizer_state_dict with StateDictOptions(full_state_dict=True).
#include <ATen/ATen.h>

#include <unordered_map>

#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "checkpoint/fsdp_checkpoint/fsdp_checkpoint_parts.h"
#include "checkpoint/python_format/optimizer_state.h"
#include "fsdp/fsdp_param.h"

namespace dpx {
namespace {

// A state tensor shaped like its parameter's shard holds the shard's rows (exp_avg,
// momentum_buffer); anything else (step) is the same on every rank. Decided by the parameter
// being sharded, never by this rank's row count, so that every rank gathers the same tensors.
bool is_sharded_state(const at::Tensor& t, const ParameterShard& s) {
  return s.sharded && t.dim() > 0 && t.sizes() == s.param.sizes();
}

// The same tensor whole, as full_optimizer_state_dict gives it: shaped like the whole parameter.
bool is_whole_state(const at::Tensor& t, const ParameterShard& s) {
  return s.sharded && t.dim() > 0 && t.sizes() == c10::IntArrayRef(s.full_sizes);
}

std::unordered_map<std::string, const ParameterShard*> by_name(
    const std::vector<ParameterShard>& shards) {
  std::unordered_map<std::string, const ParameterShard*> out;
  for (const auto& s : shards) out.emplace(s.name, &s);
  return out;
}

}  // namespace

c10::IValue full_optimizer_state_dict(const torch::nn::Module& module,
                                      const torch::optim::Optimizer& optimizer,
                                      const FullStateDictOptions& options) {
  const auto pg = fsdp_process_group(module);
  const auto shards = parameter_shards(module);
  const auto names = detail::optimizer_parameter_names(shards, optimizer);
  const auto shard_of = by_name(shards);
  const auto local = detail::optimizer_state_dict(optimizer).toGenericDict();
  const auto local_state = local.at("state").toGenericDict();
  at::NoGradGuard no_grad;
  // Every rank walks the same parameters in the same order, so the all-gathers pair up; a
  // parameter without state yet (never stepped) has none on any rank.
  auto state = detail::any_dict();
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t index = static_cast<int64_t>(i);
    if (!local_state.contains(index)) continue;
    const auto& shard = *shard_of.at(names.get(i));
    auto entry = detail::any_dict();
    for (const auto& kv : local_state.at(index).toGenericDict()) {
      auto value = kv.value();
      if (pg && value.isTensor() && is_sharded_state(value.toTensor(), shard)) {
        value = detail::gather_rows(*pg, value.toTensor(), shard.full_sizes[0]).clone();
      }
      entry.insert(kv.key(), value);
    }
    state.insert(names.get(i), entry);
  }
  auto groups = c10::impl::GenericList(c10::AnyType::get());
  for (const auto& g : local.at("param_groups").toListRef()) {
    auto group = g.toGenericDict().copy();
    auto params = c10::impl::GenericList(c10::StringType::get());
    for (const auto& index : group.at("params").toListRef()) {
      params.push_back(names.get(index.toInt()));
    }
    group.insert_or_assign("params", params);
    groups.push_back(group);
  }
  if (options.rank0_only && pg && pg->rank() != 0) return detail::any_dict();
  auto out = detail::any_dict();
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

void load_full_optimizer_state_dict(const torch::nn::Module& module,
                                    torch::optim::Optimizer& optimizer,
                                    const c10::IValue& full) {
  const auto shards = parameter_shards(module);
  const auto names = detail::optimizer_parameter_names(shards, optimizer);
  const auto shard_of = by_name(shards);
  TORCH_CHECK(full.isGenericDict() && full.toGenericDict().contains("state") &&
                  full.toGenericDict().contains("param_groups"),
              "load_full_optimizer_state_dict: expected {'state': ..., 'param_groups': ...} "
              "keyed by parameter names, as full_optimizer_state_dict and FSDP2's "
              "get_optimizer_state_dict(full_state_dict=True) make it");
  const auto given = full.toGenericDict();
  const auto given_state = given.at("state").toGenericDict();
  std::unordered_map<std::string, int64_t> index_of;
  for (size_t i = 0; i < names.size(); ++i) index_of.emplace(names.get(i), static_cast<int64_t>(i));
  // Back to the index-keyed layout, each whole tensor cut to this rank's rows.
  auto state = detail::any_dict();
  for (const auto& kv : given_state) {
    const auto& name = kv.key().toStringRef();
    const auto it = index_of.find(name);
    TORCH_CHECK(it != index_of.end(), "load_full_optimizer_state_dict: state for '", name,
                "', which is not a parameter of this optimizer");
    const auto& shard = *shard_of.at(name);
    auto entry = detail::any_dict();
    for (const auto& e : kv.value().toGenericDict()) {
      auto value = e.value();
      if (value.isTensor() && is_whole_state(value.toTensor(), shard)) {
        value = value.toTensor().narrow(0, shard.row_offset, shard.param.size(0)).clone();
      }
      entry.insert(e.key(), value);
    }
    state.insert(it->second, entry);
  }
  auto groups = c10::impl::GenericList(c10::AnyType::get());
  for (const auto& g : given.at("param_groups").toListRef()) {
    auto group = g.toGenericDict().copy();
    auto params = c10::impl::GenericList(c10::IntType::get());
    for (const auto& name : group.at("params").toListRef()) {
      const auto it = index_of.find(name.toStringRef());
      TORCH_CHECK(it != index_of.end(), "load_full_optimizer_state_dict: param group names '",
                  name.toStringRef(), "', which is not a parameter of this optimizer");
      params.push_back(it->second);
    }
    group.insert_or_assign("params", params);
    groups.push_back(group);
  }
  auto indexed = detail::any_dict();
  indexed.insert("state", state);
  indexed.insert("param_groups", groups);
  detail::load_optimizer_state_dict(optimizer, indexed);
}

}  // namespace dpx
