// Writing a module's state dict, and its optimizer's state, as a DCP checkpoint (dcp.h): each
// rank's entries (dcp_items.h) into its file, the layouts gathered over the group, rank 0's
// .metadata last.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <exception>
#include <map>
#include <unordered_map>

#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "dpx/checkpoint/dcp.h"
#include "dpx/errors.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/runtime/files.h"
#include "checkpoint/dcp/dcp_items.h"
#include "checkpoint/python_format/optimizer_state.h"
#include "checkpoint/python_format/torch_file.h"
#include "comm/coordination/control.h"

namespace dpx {
namespace detail::dcp {
namespace {

using Shards = std::unordered_map<const c10::TensorImpl*, const ParameterShard*>;

// A chunk's offsets and sizes: rows [first, first + rows) of dimension 0, the rest whole.
Chunk chunk_of(const std::vector<int64_t>& whole, int64_t first, int64_t rows) {
  Chunk c;
  c.offsets.assign(whole.size(), 0);
  c.sizes = whole;
  if (!whole.empty()) {
    c.offsets[0] = first;
    c.sizes[0] = rows;
  }
  return c;
}

std::optional<Rows> rows_of(const ParameterShard* s) {
  if (!s) return std::nullopt;
  return Rows{s->row_offset, s->full_sizes};
}

// The module's state dict under `prefix`, in state_dict() order.
void add_module(std::vector<Item>& items, const torch::nn::Module& module,
                const std::string& prefix, const Shards& sharded) {
  const std::string top = prefix.empty() || prefix.back() != '.'
                              ? ""
                              : prefix.substr(0, prefix.size() - 1);
  for (const auto& [name, t] : state_dict(module)) {
    const auto shard = sharded.find(t.unsafeGetTensorImpl());
    items.push_back({prefix + name, t.detach(),
                     rows_of(shard == sharded.end() ? nullptr : shard->second),
                     top.empty() || top.find('.') != std::string::npos ? Path{prefix + name}
                                                                        : Path{top, name}});
  }
}

// The optimizer's state as FSDP2's get_optimizer_state_dict names it (Note [DCP optimizer state]
// in dcp.h): state tensors shaped like their parameter's shard are its rows, the rest (step)
// replicated; each group's hyper-parameters and parameter names as objects.
void add_optimizer(std::vector<Item>& items, const torch::optim::Optimizer& optimizer,
                   const std::string& prefix, const std::vector<ParameterShard>& all) {
  const std::string top = prefix.empty() || prefix.back() != '.'
                              ? prefix
                              : prefix.substr(0, prefix.size() - 1);
  Shards of;
  for (const auto& s : all) of.emplace(s.param.unsafeGetTensorImpl(), &s);
  std::vector<const ParameterShard*> by_index;  // Python's numbering across the groups
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      const auto it = of.find(p.unsafeGetTensorImpl());
      TORCH_CHECK(it != of.end(), "dcp_save_state_dict: the optimizer holds a tensor that is no "
                  "parameter of the module given");
      by_index.push_back(it->second);
    }
  }
  const auto state = optimizer_state_dict(optimizer).toGenericDict();
  for (const auto& kv : state.at("state").toGenericDict()) {
    const auto& s = *by_index.at(static_cast<size_t>(kv.key().toInt()));
    for (const auto& e : kv.value().toGenericDict()) {
      const auto& key = e.key().toStringRef();
      const auto t = e.value().toTensor().detach();
      const bool rows = s.sharded && t.dim() > 0 && t.sizes() == s.param.sizes();
      items.push_back({prefix + "state." + s.name + "." + key, t, rows_of(rows ? &s : nullptr),
                       Path{top, "state", s.name, key}});
    }
  }
  int64_t g = 0;
  for (const auto& group : state.at("param_groups").toListRef()) {
    for (const auto& e : group.toGenericDict()) {
      const auto& key = e.key().toStringRef();
      c10::IValue value = e.value();
      if (key == "params") {  // indices to names
        auto names = c10::impl::GenericList(c10::StringType::get());
        for (const auto& i : value.toListRef()) names.push_back(by_index.at(i.toInt())->name);
        value = names;
      }
      items.push_back({prefix + "param_groups." + std::to_string(g) + "." + key, value,
                       std::nullopt, Path{top, "param_groups", g, key}});
    }
    ++g;
  }
}

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
                        const std::string& prefix, const std::vector<ParameterShard>& all,
                        const std::shared_ptr<ProcessGroup>& pg) {
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  if (zero.process_group()->size() != world || zero.process_group()->rank() != rank) {
    throw std::invalid_argument(
        "dcp_save_state_dict: the ZeroRedundancyOptimizer's group is not the one the checkpoint "
        "is saved over (rank " + std::to_string(zero.process_group()->rank()) + " of " +
        std::to_string(zero.process_group()->size()) + " against " + std::to_string(rank) +
        " of " + std::to_string(world) + "); pass its group");
  }
  const std::string top = prefix.empty() || prefix.back() != '.'
                              ? prefix
                              : prefix.substr(0, prefix.size() - 1);
  Shards of;
  for (const auto& s : all) of.emplace(s.param.unsafeGetTensorImpl(), &s);
  std::vector<const ParameterShard*> by_index;  // across all ranks' shares, Python's numbering
  std::unordered_map<const c10::TensorImpl*, int64_t> index;
  for (const auto& group : zero.param_groups()) {
    for (const auto& p : group.params()) {
      const auto it = of.find(p.unsafeGetTensorImpl());
      TORCH_CHECK(it != of.end(), "dcp_save_state_dict: the optimizer holds a tensor that is no "
                  "parameter of the module given");
      TORCH_CHECK(!it->second->sharded, "dcp_save_state_dict: a ZeroRedundancyOptimizer over a "
                  "fully_shard module; fully_shard shards the optimizer's state already");
      index.emplace(p.unsafeGetTensorImpl(), static_cast<int64_t>(by_index.size()));
      by_index.push_back(it->second);
    }
  }
  auto& local = const_cast<ZeroRedundancyOptimizer&>(zero).local_optimizer();
  std::vector<int64_t> local_to_global;
  for (const auto& group : local.param_groups()) {
    for (const auto& p : group.params()) local_to_global.push_back(index.at(p.unsafeGetTensorImpl()));
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
    for (const auto& p : zero.shard(r)) owner[static_cast<size_t>(index.at(p.unsafeGetTensorImpl()))] = r;
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
  int64_t g = 0;  // the hyper-parameters are the same on every rank: the local groups' own
  for (const auto& group : state.at("param_groups").toListRef()) {
    for (const auto& e : group.toGenericDict()) {
      const auto& key = e.key().toStringRef();
      c10::IValue value = e.value();
      if (key == "params") {  // every rank's share of the group, by name
        auto names = c10::impl::GenericList(c10::StringType::get());
        for (const auto& p : zero.param_groups().at(static_cast<size_t>(g)).params()) {
          names.push_back(by_index[static_cast<size_t>(index.at(p.unsafeGetTensorImpl()))]->name);
        }
        value = names;
      }
      items.push_back({prefix + "param_groups." + std::to_string(g) + "." + key, value,
                       std::nullopt, Path{top, "param_groups", g, key}});
    }
    ++g;
  }
}

void save_items(const std::vector<Item>& items, const std::string& directory,
                const std::shared_ptr<ProcessGroup>& pg, const DcpSaveOptions& options) {
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  const auto barrier = [&] {
    if (pg && world > 1) pg->barrier()->wait(options.timeout);
  };
  if (rank == 0) {  // until the new .metadata is written, the directory is no checkpoint
    make_dirs(directory);
    ::unlink((directory + "/.metadata").c_str());
  }
  barrier();

  const auto size = static_cast<int64_t>(layout_size(items));
  auto mine = at::zeros({size}, at::kLong);
  std::exception_ptr failure;
  try {
    const auto layout = write_part(items, directory, rank, world, options.write);
    std::copy(layout.begin(), layout.end(), mine.data_ptr<int64_t>());
  } catch (...) {
    failure = std::current_exception();
  }

  auto all = mine;
  if (pg && world > 1) {
    all = at::empty({world * size}, at::kLong);
    control_allgather(*pg, all, mine, options.timeout);
  }
  std::vector<const int64_t*> layouts;
  std::string failed;
  for (int r = 0; r < world; ++r) {
    layouts.push_back(all.data_ptr<int64_t>() + r * size);
    if (layouts.back()[0] != 1) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (failure) std::rethrow_exception(failure);
  if (!failed.empty()) {
    throw CheckpointError(where(rank, world) + "dcp_save_state_dict: rank(s) " + failed +
                          " could not write their part of " + directory +
                          " (their own errors say why); no .metadata was written");
  }
  if (rank == 0) {
    write_file_atomically(directory + "/.metadata", pickle_metadata(metadata_of(items, layouts)));
  }
  barrier();
}

}  // namespace

std::shared_ptr<ProcessGroup> save_group(const torch::nn::Module& module,
                                         std::shared_ptr<ProcessGroup> given) {
  const auto sharding_group = fsdp_process_group(module);
  if (given && sharding_group && given != sharding_group) {
    throw std::invalid_argument(
        "dcp_save_state_dict: the module is sharded over another process group than the one "
        "given; pass its own (or none)");
  }
  return given ? given : sharding_group;
}

std::vector<Item> collect_items(const torch::nn::Module& module,
                                const torch::optim::Optimizer* optimizer,
                                const DcpSaveOptions& options,
                                const std::vector<ExtraEntry>& extras,
                                const std::shared_ptr<ProcessGroup>& pg) {
  const auto all = parameter_shards(module);
  Shards sharded;
  for (const auto& s : all) {
    if (s.sharded) sharded.emplace(s.param.unsafeGetTensorImpl(), &s);
  }
  std::vector<Item> items;
  add_module(items, module, options.prefix, sharded);
  if (const auto* zero = dynamic_cast<const ZeroRedundancyOptimizer*>(optimizer)) {
    add_zero_optimizer(items, *zero, options.optimizer_prefix, all, pg);
  } else if (optimizer) {
    add_optimizer(items, *optimizer, options.optimizer_prefix, all);
  }
  for (const auto& extra : extras) {
    std::string fqn;
    for (const auto& part : extra.path) {
      fqn += (fqn.empty() ? "" : ".") + (std::holds_alternative<int64_t>(part)
                                             ? std::to_string(std::get<int64_t>(part))
                                             : std::get<std::string>(part));
    }
    items.push_back({fqn, extra.value, std::nullopt, extra.path});
  }
  return items;
}

std::vector<Item> snapshot(const std::vector<Item>& items) {
  std::vector<Item> copy = items;
  for (auto& item : copy) {
    if (!item.value.isTensor()) continue;  // ints, floats, strings, tuples: values already
    const auto& t = item.value.toTensor();
    if (t.is_meta()) continue;  // another rank writes it (Note [DCP from ZeRO])
    item.value = t.to(at::kCPU, t.scalar_type(), /*non_blocking=*/false, /*copy=*/true,
                      at::MemoryFormat::Contiguous);
  }
  return copy;
}

size_t layout_size(const std::vector<Item>& items) { return 1 + items.size() * kFields; }

std::string part_file(int rank) { return "__" + std::to_string(rank) + "_0.distcp"; }

Layout write_part(const std::vector<Item>& items, const std::string& directory, int rank,
                  int world, const CheckpointWriteOptions& write) {
  Layout layout(layout_size(items), 0);
  // Chunk after chunk straight into the file: never the whole part in memory.
  write_file_atomically(
      directory + "/" + part_file(rank),
      [&](const ByteSink& sink) {
        int64_t offset = 0;
        for (size_t i = 0; i < items.size(); ++i) {
          const auto& item = items[i];
          int64_t* e = layout.data() + 1 + i * kFields;
          const int writer = item.rows      ? rank
                             : item.writer >= 0 ? item.writer
                                                : static_cast<int>(i % world);
          if (writer != rank) continue;  // another rank's
          int64_t length = 0;
          torch_save_to(item.value, [&](const char* data, size_t size) {
            sink(data, size);
            length += static_cast<int64_t>(size);
          });
          const bool scalar = !item.value.isTensor() || item.value.toTensor().dim() == 0;
          e[kWritten] = 1;
          e[kFirstRow] = item.rows ? item.rows->first : 0;
          e[kRows] = scalar ? 1 : item.value.toTensor().size(0);
          e[kOffset] = offset;
          e[kLength] = length;
          offset += length;
        }
      },
      write);
  layout[0] = 1;  // this rank's part is on disk
  return layout;
}

Metadata metadata_of(const std::vector<Item>& items, const std::vector<const int64_t*>& layouts) {
  Metadata m;
  m.version = kDcpVersion;
  const int world = static_cast<int>(layouts.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& item = items[i];
    m.planner_data[item.fqn] = item.path;
    if (!item.value.isTensor()) {
      for (int r = 0; r < world; ++r) {
        const int64_t* e = layouts[r] + 1 + i * kFields;
        if (e[kWritten] == 1) m.objects[item.fqn] = {part_file(r), e[kOffset], e[kLength]};
      }
      continue;
    }
    const auto& t = item.value.toTensor();
    auto& entry = m.tensors[item.fqn];
    entry.dtype = t.scalar_type();
    entry.size = item.rows ? item.rows->whole : t.sizes().vec();
    for (int r = 0; r < world; ++r) {
      const int64_t* e = layouts[r] + 1 + i * kFields;
      if (e[kWritten] != 1) continue;
      auto chunk = chunk_of(entry.size, e[kFirstRow], e[kRows]);
      chunk.storage = {part_file(r), e[kOffset], e[kLength]};
      entry.chunks.push_back(std::move(chunk));
    }
  }
  return m;
}

void save_with_extras(const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                      const std::string& directory, std::shared_ptr<ProcessGroup> process_group,
                      const DcpSaveOptions& options, const std::vector<ExtraEntry>& extras) {
  const auto pg = save_group(module, std::move(process_group));
  save_items(collect_items(module, &optimizer, options, extras, pg), directory, pg, options);
}

}  // namespace detail::dcp

void dcp_save_state_dict(const torch::nn::Module& module, const std::string& directory,
                         std::shared_ptr<ProcessGroup> process_group,
                         const DcpSaveOptions& options) {
  const auto pg = detail::dcp::save_group(module, std::move(process_group));
  detail::dcp::save_items(detail::dcp::collect_items(module, nullptr, options, {}, pg), directory,
                          pg, options);
}

void dcp_save_state_dict(const torch::nn::Module& module,
                         const torch::optim::Optimizer& optimizer, const std::string& directory,
                         std::shared_ptr<ProcessGroup> process_group,
                         const DcpSaveOptions& options) {
  detail::dcp::save_with_extras(module, optimizer, directory, std::move(process_group), options,
                                {});
}

}  // namespace dpx
