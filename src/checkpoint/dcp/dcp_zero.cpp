// Writing a ZeroRedundancyOptimizer's state into a DCP save (Note [DCP from ZeRO]): every rank
// the state of its share, listed alike on every rank.
#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <utility>

#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "checkpoint/dcp/dcp_items.h"
#include "checkpoint/python_format/optimizer_state.h"
#include "comm/coordination/control.h"

namespace dpx::detail::dcp {

// Note [DCP from ZeRO]
// A ZeroRedundancyOptimizer's rank keeps the state of its shard of the parameters only, whole. It
// is written as a plain optimizer's would be (Note [DCP optimizer state] in dcp.h: what
// get_optimizer_state_dict gives for a model that is not sharded), each state tensor by the rank
// that owns it, in one chunk, so that dcp.load fills a plain model's optimizer, or FSDP2's, on any
// number of ranks. Every rank must list the same entries in the same order, but only the owner
// knows which state a parameter has (none before its first step; max_exp_avg_sq with amsgrad):
// one all-reduce of a code per parameter and state key (the dtype, and whether the tensor is a
// scalar like step or shaped like its parameter) tells every rank, and the others stand in for
// the tensor with a meta tensor of that dtype and shape, which gives .metadata its entry.
constexpr std::array<const char*, 5> kStateKeys = {"step", "exp_avg", "exp_avg_sq",
                                                   "max_exp_avg_sq", "momentum_buffer"};

void add_zero_optimizer(std::vector<Item>& items, const ZeroRedundancyOptimizer& zero,
                        const std::string& prefix, const Shards& of,
                        const std::shared_ptr<ProcessGroup>& pg) {
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  if (zero.process_group()->size() != world || zero.process_group()->rank() != rank) {
    throw std::invalid_argument(
        "dcp_save_state_dict: the ZeroRedundancyOptimizer's group is not the one the checkpoint "
        "is saved over (rank " + std::to_string(zero.process_group()->rank()) + " of " +
        std::to_string(zero.process_group()->size()) + " against " + std::to_string(rank) +
        " of " + std::to_string(world) + "); pass its group");
  }
  const std::string top = path_root(prefix);
  const auto by_index = numbered_params(zero.param_groups(), of);  // every rank's share
  std::unordered_map<const c10::TensorImpl*, int64_t> index;
  for (size_t i = 0; i < by_index.size(); ++i) {
    TORCH_CHECK(!by_index[i]->sharded, "dcp_save_state_dict: a ZeroRedundancyOptimizer over a "
                "fully_shard module; fully_shard shards the optimizer's state already");
    index.emplace(by_index[i]->param.unsafeGetTensorImpl(), static_cast<int64_t>(i));
  }
  auto& local = const_cast<ZeroRedundancyOptimizer&>(zero).local_optimizer();
  std::vector<int64_t> local_to_global;
  for (const auto& group : local.param_groups()) {
    for (const auto& p : group.params()) {
      local_to_global.push_back(index.at(p.unsafeGetTensorImpl()));
    }
  }
  const auto n = static_cast<int64_t>(by_index.size());
  const auto keys = static_cast<int64_t>(kStateKeys.size());
  auto codes = at::zeros({n * keys}, at::kLong);  // (dtype + 1) + 256 * scalar; 0: absent
  auto* code = codes.data_ptr<int64_t>();
  std::map<std::pair<int64_t, int64_t>, at::Tensor> mine;
  const auto state = optimizer_state_dict(local).toGenericDict();
  for (const auto& kv : state.at("state").toGenericDict()) {
    const int64_t i = local_to_global.at(static_cast<size_t>(kv.key().toInt()));
    const auto& param = by_index[static_cast<size_t>(i)]->param;
    for (const auto& e : kv.value().toGenericDict()) {
      const auto& key = e.key().toStringRef();
      const auto k = std::find(kStateKeys.begin(), kStateKeys.end(), key) - kStateKeys.begin();
      const auto t = e.value().toTensor().detach();
      if (k == keys || (t.dim() != 0 && t.sizes() != param.sizes())) {
        throw std::invalid_argument("dcp_save_state_dict: the ZeroRedundancyOptimizer's state '" +
                                    key + "' of " + by_index[static_cast<size_t>(i)]->name +
                                    " is no state of SGD, Adam or AdamW (shaped like its "
                                    "parameter, or a scalar)");
      }
      code[i * keys + k] = static_cast<int64_t>(t.scalar_type()) + 1 + (t.dim() == 0 ? 256 : 0);
      mine.emplace(std::make_pair(i, static_cast<int64_t>(k)), t);
    }
  }
  if (pg && world > 1) control_allreduce(*pg, codes)->wait();
  std::vector<int> owner(static_cast<size_t>(n), -1);
  for (int r = 0; r < world; ++r) {
    for (const auto& p : zero.shard(r)) {
      owner[static_cast<size_t>(index.at(p.unsafeGetTensorImpl()))] = r;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const auto& s = *by_index[static_cast<size_t>(i)];
    for (int64_t k = 0; k < keys; ++k) {
      const int64_t c = code[i * keys + k];
      if (c == 0) continue;
      const auto dtype = static_cast<c10::ScalarType>(c % 256 - 1);
      const auto found = mine.find({i, k});
      at::Tensor value = found != mine.end()
                             ? found->second
                             : at::empty(c >= 256 ? std::vector<int64_t>{} : s.param.sizes().vec(),
                                         at::TensorOptions().dtype(dtype).device(at::kMeta));
      Item item{prefix + "state." + s.name + "." + kStateKeys[k], value, std::nullopt,
                Path{top, "state", s.name, kStateKeys[k]}};
      item.writer = owner[static_cast<size_t>(i)];
      items.push_back(std::move(item));
    }
  }
  // The hyper-parameters are the same on every rank: the local groups' own, naming all ranks'
  // shares.
  add_param_groups(items, state.at("param_groups"), zero.param_groups(), by_index, prefix);
}

}  // namespace dpx::detail::dcp
