// Loading a sharded checkpoint (Note [Sharded checkpoint] in fsdp_checkpoint.h): the newest
// complete one, on this world size or resharded from another.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstdio>
#include <map>
#include <unordered_map>

#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/runtime/files.h"
#include "checkpoint/fsdp_checkpoint/fsdp_checkpoint_parts.h"
#include "checkpoint/python_format/optimizer_state.h"

namespace dpx {
namespace detail {

std::string part_name(int rank, int world) {
  return "rank" + std::to_string(rank) + "-of-" + std::to_string(world) + ".pt";
}

int part_world(const std::string& name) {
  int rank = -1, world = -1;
  if (std::sscanf(name.c_str(), "rank%d-of-%d.pt", &rank, &world) != 2) return -1;
  return rank >= 0 && world > rank && name == part_name(rank, world) ? world : -1;
}

}  // namespace detail

namespace {

using Dict = c10::impl::GenericDict;

// The world size a complete checkpoint was saved on; a folder missing a part is refused.
int world_of(const std::string& dir) {
  int world = -1, parts = 0;
  for (const auto& name : list_dir(dir)) {
    const int w = detail::part_world(name);
    if (w < 0) continue;
    if (world >= 0 && w != world) throw CheckpointError(dir + " holds parts of two world sizes");
    world = w;
    ++parts;
  }
  if (world < 1 || parts != world) {
    throw CheckpointError(dir + " is incomplete: " + std::to_string(parts) + " of " +
                          std::to_string(world) + " parts");
  }
  return world;
}

// Copies the rows two shards of one tensor have in common; returns how many.
int64_t copy_overlap(const at::Tensor& to, int64_t to_first, const at::Tensor& from,
                     int64_t from_first) {
  const int64_t lo = std::max(to_first, from_first);
  const int64_t hi = std::min(to_first + to.size(0), from_first + from.size(0));
  if (hi <= lo) return 0;
  at::NoGradGuard no_grad;
  to.narrow(0, lo - to_first, hi - lo).copy_(from.narrow(0, lo - from_first, hi - lo));
  return hi - lo;
}

// Gathers this rank's shards of the model and of the optimizer's state from the parts it reads.
class PartLoader {
 public:
  PartLoader(torch::nn::Module& model, torch::optim::Optimizer& optimizer)
      : model_(model), optimizer_(optimizer), shards_(parameter_shards(model)) {
    for (std::size_t i = 0; i < shards_.size(); ++i) by_name_[shards_[i].name] = i;
    const auto names = detail::optimizer_parameter_names(shards_, optimizer);
    for (std::size_t i = 0; i < names.size(); ++i) optimizer_index_[names.get(i)] = i;
  }

  // `first`: the part replicated state (buffers, hyper-parameters, progress) is taken from.
  void add(const c10::IValue& value, const std::string& what, bool first);
  TrainingProgress finish();

 private:
  void add_optimizer_state(const Dict& part, const std::string& what,
                           const std::map<std::string, int64_t>& first_rows);

  torch::nn::Module& model_;
  torch::optim::Optimizer& optimizer_;
  std::vector<ParameterShard> shards_;
  std::map<std::string, std::size_t> by_name_;
  std::map<std::string, int64_t> optimizer_index_;
  std::vector<int64_t> covered_ = std::vector<int64_t>(shards_.size(), 0);
  std::map<int64_t, std::map<std::string, c10::IValue>> state_;  // my index -> key -> value
  c10::IValue groups_;
  TrainingProgress progress_;
};

void PartLoader::add(const c10::IValue& value, const std::string& what, bool first) {
  if (!value.isGenericDict()) throw CheckpointError(what + " is not a sharded checkpoint's part");
  const auto part = value.toGenericDict();
  const auto params = part.at(detail::kPartParams).toGenericDict();
  const auto layout = part.at(detail::kPartLayout).toGenericDict();
  std::map<std::string, int64_t> first_rows;  // of this part's shard of each parameter
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    const auto& s = shards_[i];
    if (!params.contains(s.name)) throw CheckpointError(what + " has no parameter " + s.name);
    // The unpickler gives a generic list of ints, not an IntList.
    std::vector<int64_t> entry;
    for (const auto& v : layout.at(s.name).toListRef()) entry.push_back(v.toInt());
    const int64_t first_row = entry.back();
    entry.pop_back();
    if (entry != s.full_sizes) {
      throw CheckpointError(what + ": parameter " + s.name + " has shape " +
                            c10::str(at::IntArrayRef(entry)) + " there, " +
                            c10::str(at::IntArrayRef(s.full_sizes)) + " in the model");
    }
    first_rows[s.name] = first_row;
    covered_[i] += copy_overlap(s.param, s.row_offset, params.at(s.name).toTensor(), first_row);
  }
  if (first) {
    const auto buffers = part.at(detail::kPartBuffers).toGenericDict();
    at::NoGradGuard no_grad;
    for (const auto& b : model_.named_buffers()) {
      if (!buffers.contains(b.key())) throw CheckpointError(what + " has no buffer " + b.key());
      b.value().copy_(buffers.at(b.key()).toTensor());
    }
    groups_ = part.at(detail::kPartOptimizer).toGenericDict().at("param_groups");
    progress_ = {part.at("epoch").toInt(), part.at("step").toInt(),
                 part.at("sampler_position").toInt()};
  }
  add_optimizer_state(part, what, first_rows);
}

void PartLoader::add_optimizer_state(const Dict& part, const std::string& what,
                                     const std::map<std::string, int64_t>& first_rows) {
  const auto names = part.at(detail::kPartOptimizerNames).toListRef();
  const auto state = part.at(detail::kPartOptimizer).toGenericDict().at("state").toGenericDict();
  const auto params = part.at(detail::kPartParams).toGenericDict();
  for (const auto& entry : state) {
    const auto& name = names.at(entry.key().toInt()).toStringRef();
    auto mine = optimizer_index_.find(name);
    if (mine == optimizer_index_.end()) {
      throw CheckpointError(what + ": the optimizer state of " + name + " has no parameter of "
                            "this optimizer to go to");
    }
    const auto& s = shards_[by_name_.at(name)];
    const int64_t old_rows = params.at(name).toTensor().size(0);
    auto& slots = state_[mine->second];
    for (const auto& kv : entry.value().toGenericDict()) {
      const auto& key = kv.key().toStringRef();
      const auto& v = kv.value();
      const bool shard = v.isTensor() && v.toTensor().dim() == s.param.dim() &&
                         v.toTensor().size(0) == old_rows &&
                         v.toTensor().sizes().slice(1) == s.param.sizes().slice(1);
      if (!shard) {  // replicated (Adam's step): the same in every part
        slots.emplace(key, v);
        continue;
      }
      auto it = slots.find(key);
      if (it == slots.end()) {
        it = slots.emplace(key, at::zeros(s.param.sizes(), v.toTensor().options())).first;
      }
      copy_overlap(it->second.toTensor(), s.row_offset, v.toTensor(), first_rows.at(name));
    }
  }
}

TrainingProgress PartLoader::finish() {
  for (std::size_t i = 0; i < shards_.size(); ++i) {
    if (covered_[i] != shards_[i].param.size(0)) {
      throw CheckpointError("sharded checkpoint: rows of parameter " + shards_[i].name +
                            " are in none of its parts");
    }
  }
  auto state = Dict(c10::AnyType::get(), c10::AnyType::get());
  for (const auto& [index, slots] : state_) {
    auto d = Dict(c10::AnyType::get(), c10::AnyType::get());
    for (const auto& [key, v] : slots) d.insert(key, v);
    state.insert(index, d);
  }
  // This optimizer's indices: parameters are matched by name, the groups by position.
  auto groups = c10::impl::GenericList(c10::AnyType::get());
  int64_t index = 0;
  const auto saved = groups_.toListRef();
  for (std::size_t g = 0; g < saved.size(); ++g) {
    auto group = saved[g].toGenericDict().copy();
    c10::List<int64_t> params;
    const auto& mine = optimizer_.param_groups();
    const std::size_t n = g < mine.size() ? mine[g].params().size() : 0;
    for (std::size_t j = 0; j < n; ++j) params.push_back(index++);
    group.insert_or_assign("params", params);
    groups.push_back(group);
  }
  auto dict = Dict(c10::AnyType::get(), c10::AnyType::get());
  dict.insert("state", state);
  dict.insert("param_groups", groups);
  detail::load_optimizer_state_dict(optimizer_, dict);
  return progress_;
}

}  // namespace

std::optional<TrainingProgress> ShardedCheckpointer::load_latest(
    torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  barrier();
  const int64_t step = detail::agree_on_latest_step(
      *pg_, options_.timeout, detail::sharded_folders(options_.directory),
      [&] { return list(); }, [](const std::string& dir) { world_of(dir); },
      "ShardedCheckpointer");
  if (step < 0) return std::nullopt;
  const std::string dir = path_for_step(step);
  const int saved_world = world_of(dir);
  PartLoader loader(model, optimizer);
  if (saved_world == pg_->size()) {
    const auto path = dir + "/" + detail::part_name(pg_->rank(), saved_world);
    loader.add(torch_load(path), path, /*first=*/true);
  } else {
    for (int r = 0; r < saved_world; ++r) {  // one part in memory at a time
      const auto path = dir + "/" + detail::part_name(r, saved_world);
      loader.add(torch_load(path), path, /*first=*/r == 0);
    }
  }
  const auto progress = loader.finish();
  barrier();
  return progress;
}

}  // namespace dpx
