// Writing a module's state dict, and its optimizer's state, as a DCP checkpoint (dcp.h): each
// rank's entries (dcp_items.h) into its file, the layouts gathered over the group, rank 0's
// .metadata last.
#include <unistd.h>

#include <c10/util/StringUtil.h>

#include <exception>
#include <unordered_map>

#include "dpx/algorithms/zero_redundancy_optimizer.h"  // the dynamic_cast in collect_items
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
                   const std::string& prefix, const Shards& of) {
  const std::string top = path_root(prefix);
  const auto by_index = numbered_params(optimizer.param_groups(), of);
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
  add_param_groups(items, state.at("param_groups"), optimizer.param_groups(), by_index, prefix);
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
  for (int r = 0; r < world; ++r) layouts.push_back(all.data_ptr<int64_t>() + r * size);
  if (failure) std::rethrow_exception(failure);
  check_parts_written(layouts, directory, where(rank, world) + "dcp_save_state_dict: ");
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

std::string path_root(const std::string& prefix) {
  return prefix.empty() || prefix.back() != '.' ? prefix : prefix.substr(0, prefix.size() - 1);
}

std::vector<const ParameterShard*> numbered_params(
    const std::vector<torch::optim::OptimizerParamGroup>& groups, const Shards& of) {
  std::vector<const ParameterShard*> by_index;
  for (const auto& group : groups) {
    for (const auto& p : group.params()) {
      const auto it = of.find(p.unsafeGetTensorImpl());
      TORCH_CHECK(it != of.end(), "dcp_save_state_dict: the optimizer holds a tensor that is no "
                  "parameter of the module given");
      by_index.push_back(it->second);
    }
  }
  return by_index;
}

void add_param_groups(std::vector<Item>& items, const c10::IValue& groups,
                      const std::vector<torch::optim::OptimizerParamGroup>& params_of,
                      const std::vector<const ParameterShard*>& numbered,
                      const std::string& prefix) {
  const std::string top = path_root(prefix);
  size_t first = 0;  // group g's first parameter in `numbered`
  int64_t g = 0;
  for (const auto& group : groups.toListRef()) {
    for (const auto& e : group.toGenericDict()) {
      const auto& key = e.key().toStringRef();
      c10::IValue value = e.value();
      if (key == "params") {  // by name, as get_optimizer_state_dict gives them
        auto names = c10::impl::GenericList(c10::StringType::get());
        for (size_t i = 0; i < params_of.at(static_cast<size_t>(g)).params().size(); ++i) {
          names.push_back(numbered.at(first + i)->name);
        }
        value = names;
      }
      items.push_back({prefix + "param_groups." + std::to_string(g) + "." + key, value,
                       std::nullopt, Path{top, "param_groups", g, key}});
    }
    first += params_of.at(static_cast<size_t>(g)).params().size();
    ++g;
  }
}

void check_parts_written(const std::vector<const int64_t*>& layouts, const std::string& directory,
                         const std::string& who) {
  std::vector<int> failed;
  for (size_t r = 0; r < layouts.size(); ++r) {
    if (layouts[r][0] != 1) failed.push_back(static_cast<int>(r));
  }
  if (!failed.empty()) {
    throw CheckpointError(who + "rank(s) " + c10::Join(", ", failed) +
                          " could not write their part of " + directory +
                          " (their own errors say why); no .metadata was written");
  }
}

std::vector<Item> collect_items(const torch::nn::Module& module,
                                const torch::optim::Optimizer* optimizer,
                                const DcpSaveOptions& options,
                                const std::vector<ExtraEntry>& extras,
                                const std::shared_ptr<ProcessGroup>& pg) {
  const auto all = parameter_shards(module);
  Shards of, sharded;
  for (const auto& s : all) {
    of.emplace(s.param.unsafeGetTensorImpl(), &s);
    if (s.sharded) sharded.emplace(s.param.unsafeGetTensorImpl(), &s);
  }
  std::vector<Item> items;
  add_module(items, module, options.prefix, sharded);
  if (const auto* zero = dynamic_cast<const ZeroRedundancyOptimizer*>(optimizer)) {
    add_zero_optimizer(items, *zero, options.optimizer_prefix, of, pg);
  } else if (optimizer) {
    add_optimizer(items, *optimizer, options.optimizer_prefix, of);
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
