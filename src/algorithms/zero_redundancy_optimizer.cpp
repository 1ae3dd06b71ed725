#include "dpx/algorithms/zero_redundancy_optimizer.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstring>
#include <sstream>

#include "runtime/compat/optimizer.h"
#include "comm/coordination/control.h"
#include "comm/broadcast_coalesced.h"
#include "algorithms/zero_partition.h"

namespace dpx {
namespace {

using torch::optim::Optimizer;
using torch::optim::OptimizerParamGroup;

constexpr const char* kWorldKey = "zero/world_size";
std::string shard_key(int r) { return "zero/shard/" + std::to_string(r); }

std::vector<OptimizerParamGroup> with_params(const std::vector<OptimizerParamGroup>& groups,
                                             const std::vector<std::vector<at::Tensor>>& params) {
  std::vector<OptimizerParamGroup> out;
  for (size_t i = 0; i < groups.size(); ++i) {
    out.emplace_back(params[i], groups[i].options().clone());
  }
  return out;
}

// [group][rank] -> the parameters of rank r in each group.
std::vector<std::vector<at::Tensor>> rank_groups(
    const std::vector<OptimizerParamGroup>& groups,
    const std::vector<std::vector<std::vector<size_t>>>& assignment, int rank) {
  std::vector<std::vector<at::Tensor>> out(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    for (size_t k : assignment[i][rank]) out[i].push_back(groups[i].params()[k]);
  }
  return out;
}

std::vector<std::vector<std::vector<size_t>>> partition_groups(
    const std::vector<OptimizerParamGroup>& groups, int world) {
  std::vector<std::vector<int64_t>> numels(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) {
    for (const auto& p : groups[i].params()) numels[i].push_back(p.numel());
  }
  return detail::zero_partition(numels, world);
}

std::vector<OptimizerParamGroup> copy_groups(const Optimizer& optimizer) {
  return optimizer.param_groups();  // OptimizerParamGroup's copy clones the options
}

std::string to_bytes(const Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

}  // namespace

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<OptimizerParamGroup> param_groups,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 OptimizerFactory make)
    : ZeroRedundancyOptimizer(make(std::move(param_groups)), std::move(group), make) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<at::Tensor> params,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 OptimizerFactory make)
    : ZeroRedundancyOptimizer(
          [&] {
            std::vector<OptimizerParamGroup> groups;
            groups.emplace_back(std::move(params));
            return groups;
          }(),
          std::move(group), std::move(make)) {}

// `whole` is the unsharded optimizer, built only to learn each group's full options.
ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::unique_ptr<Optimizer> whole,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 OptimizerFactory make)
    : Optimizer(copy_groups(*whole), whole->defaults().clone()),
      group_(std::move(group)),
      make_(std::move(make)) {
  TORCH_CHECK(group_, "ZeroRedundancyOptimizer: the process group is null");
  const auto assignment = partition_groups(param_groups(), group_->size());
  shards_.resize(group_->size());
  for (int r = 0; r < group_->size(); ++r) {
    for (const auto& params : rank_groups(param_groups(), assignment, r)) {
      shards_[r].insert(shards_[r].end(), params.begin(), params.end());
    }
  }
  local_ = make_(with_params(param_groups(), rank_groups(param_groups(), assignment,
                                                         group_->rank())));
}

at::Tensor ZeroRedundancyOptimizer::step(LossClosure closure) {
  TORCH_CHECK(param_groups().size() == local_->param_groups().size(), group_->where(),
              "ZeroRedundancyOptimizer: a parameter group was added after construction; build it "
              "with every group instead, so that every rank partitions the same parameters");
  // The options of this optimizer's groups are the ones users (and LR schedulers) change.
  for (size_t i = 0; i < param_groups().size(); ++i) {
    local_->param_groups()[i].set_options(param_groups()[i].options().clone());
  }
  auto loss = local_->step(std::move(closure));
  if (group_->size() > 1) {
    at::NoGradGuard no_grad;
    for (int r = 0; r < group_->size(); ++r) {
      if (!shards_[r].empty()) detail::broadcast_coalesced(*group_, shards_[r], r);
    }
  }
  return loss;
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  const int world = group_->size();
  TORCH_CHECK(to >= 0 && to < world, group_->where(), "consolidate_state_dict: rank ", to,
              " is not in the group of ", world, " ranks");
  const auto mine = to_bytes(*local_);
  // Host tensors through the group's device, if it has one (Note [Control tensors]).
  auto sizes = at::empty({world}, at::kLong);
  detail::control_allgather(*group_, sizes,
                            at::full({1}, static_cast<int64_t>(mine.size()), at::kLong));
  std::vector<std::string> all(world);
  for (int r = 0; r < world; ++r) {
    // Bytes travel as int32 words: process groups carry arithmetic types only.
    const auto n = sizes[r].item<int64_t>();
    auto words = at::zeros({(n + 3) / 4}, at::kInt);
    if (r == group_->rank()) std::memcpy(words.data_ptr(), mine.data(), mine.size());
    if (world > 1) detail::control_broadcast(*group_, words, r);
    all[r].assign(static_cast<const char*>(words.data_ptr()), n);
  }
  consolidated_.reset();
  if (group_->rank() == to) consolidated_ = std::move(all);
}

void ZeroRedundancyOptimizer::save(torch::serialize::OutputArchive& archive) const {
  TORCH_CHECK(consolidated_, group_->where(),
              "ZeroRedundancyOptimizer: this rank holds no consolidated state; call "
              "consolidate_state_dict(to) on every rank first, then save on rank `to`");
  const auto& all = *consolidated_;
  archive.write(kWorldKey, c10::IValue(static_cast<int64_t>(all.size())));
  for (size_t r = 0; r < all.size(); ++r) {
    auto bytes = at::empty({static_cast<int64_t>(all[r].size())}, at::kByte);
    std::memcpy(bytes.data_ptr(), all[r].data(), all[r].size());
    archive.write(shard_key(static_cast<int>(r)), bytes);
  }
}

// Note [ZeRO load]
// The saved state is every old rank's optimizer over its old shard. For each, an optimizer of the
// same kind is built over that same shard of this rank's parameters (the partition depends only on
// the parameters' sizes) and loads it; the states of the parameters this rank now owns then move
// into its optimizer. State is keyed by parameter, so any world size loads any other.
void ZeroRedundancyOptimizer::load(torch::serialize::InputArchive& archive) {
  c10::IValue world_value;
  TORCH_CHECK(archive.try_read(kWorldKey, world_value), group_->where(),
              "ZeroRedundancyOptimizer: this archive was not saved by a ZeroRedundancyOptimizer "
              "(it has no '", kWorldKey, "')");
  const int old_world = static_cast<int>(world_value.toInt());
  const auto assignment = partition_groups(param_groups(), old_world);
  local_->state().clear();
  for (int r = 0; r < old_world; ++r) {
    at::Tensor bytes;
    archive.read(shard_key(r), bytes);
    std::istringstream in(std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel()));
    torch::serialize::InputArchive old_archive;
    old_archive.load_from(in);
    const auto old_params = rank_groups(param_groups(), assignment, r);
    auto old = make_(with_params(param_groups(), old_params));
    old->load(old_archive);  // state only: LibTorch's load() leaves options as they are
    for (const auto& p : shards_[group_->rank()]) {
      auto it = old->state().find(compat::optimizer_state_key(p));
      if (it != old->state().end()) {
        local_->state()[compat::optimizer_state_key(p)] = std::move(it->second);
      }
    }
  }
}

}  // namespace dpx
