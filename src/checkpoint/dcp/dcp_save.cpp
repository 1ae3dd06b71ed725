// Writing a module's state dict, and its optimizer's state, as a DCP checkpoint (dcp.h): each
// rank its file of chunks and objects, the layout gathered, rank 0's .metadata last.
#include <unistd.h>

#include <exception>
#include <unordered_map>
#include <variant>

#include "dpx/checkpoint/dcp.h"
#include "dpx/errors.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/runtime/files.h"
#include "checkpoint/dcp/dcp_extras.h"
#include "checkpoint/dcp/metadata.h"
#include "checkpoint/python_format/optimizer_state.h"
#include "checkpoint/python_format/torch_file.h"
#include "comm/coordination/control.h"

namespace dpx {
namespace {

// What each rank tells rank 0 of each entry (in the same order on every rank): whether it wrote
// a chunk of it, the chunk's first row and rows, and where its bytes are.
enum Field : int64_t { kWritten, kFirstRow, kRows, kOffset, kLength, kFields };

std::string file_of(int rank) { return "__" + std::to_string(rank) + "_0.distcp"; }

// A chunk's offsets and sizes: rows [first, first + rows) of dimension 0, the rest whole.
detail::dcp::Chunk chunk_of(const std::vector<int64_t>& whole, int64_t first, int64_t rows) {
  detail::dcp::Chunk c;
  c.offsets.assign(whole.size(), 0);
  c.sizes = whole;
  if (!whole.empty()) {
    c.offsets[0] = first;
    c.sizes[0] = rows;
  }
  return c;
}


using Path = std::vector<std::variant<std::string, int64_t>>;

// One entry of the checkpoint: a tensor (this rank's rows of a sharded one, or a replicated one,
// which one rank writes) or any other object (written by one rank, as BytesStorageMetadata).
struct Item {
  std::string fqn;
  c10::IValue value;
  const ParameterShard* shard = nullptr;  // sharded: the rows this rank holds of the whole
  Path path;                              // planner_data
};

// The module's state dict under `prefix`, in state_dict() order.
void add_module(std::vector<Item>& items, const torch::nn::Module& module,
                const std::string& prefix,
                const std::unordered_map<const c10::TensorImpl*, ParameterShard>& shards) {
  const std::string top = prefix.empty() || prefix.back() != '.'
                              ? ""
                              : prefix.substr(0, prefix.size() - 1);
  for (const auto& [name, t] : state_dict(module)) {
    const auto shard = shards.find(t.unsafeGetTensorImpl());
    items.push_back({prefix + name, t.detach(), shard == shards.end() ? nullptr : &shard->second,
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
  std::unordered_map<const c10::TensorImpl*, const ParameterShard*> of;
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
  const auto state = detail::optimizer_state_dict(optimizer).toGenericDict();
  for (const auto& kv : state.at("state").toGenericDict()) {
    const auto& s = *by_index.at(static_cast<size_t>(kv.key().toInt()));
    for (const auto& e : kv.value().toGenericDict()) {
      const auto& key = e.key().toStringRef();
      const auto t = e.value().toTensor().detach();
      const bool rows = s.sharded && t.dim() > 0 && t.sizes() == s.param.sizes();
      items.push_back({prefix + "state." + s.name + "." + key, t, rows ? &s : nullptr,
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
      items.push_back({prefix + "param_groups." + std::to_string(g) + "." + key, value, nullptr,
                       Path{top, "param_groups", g, key}});
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
  const auto n = static_cast<int64_t>(items.size());

  if (rank == 0) {  // until the new .metadata is written, the directory is no checkpoint
    make_dirs(directory);
    ::unlink((directory + "/.metadata").c_str());
  }
  barrier();

  auto mine = at::zeros({1 + n * kFields}, at::kLong);
  auto* row = mine.data_ptr<int64_t>();
  std::exception_ptr failure;
  try {
    // Chunk after chunk straight into the file: never the whole part in memory.
    write_file_atomically(
        directory + "/" + file_of(rank),
        [&](const ByteSink& sink) {
          int64_t offset = 0;
          for (int64_t i = 0; i < n; ++i) {
            const auto& item = items[static_cast<size_t>(i)];
            int64_t* e = row + 1 + i * kFields;
            if (!item.shard && i % world != rank) continue;  // another rank writes it
            int64_t length = 0;
            detail::torch_save_to(item.value, [&](const char* data, size_t size) {
              sink(data, size);
              length += static_cast<int64_t>(size);
            });
            const bool scalar = !item.value.isTensor() || item.value.toTensor().dim() == 0;
            e[kWritten] = 1;
            e[kFirstRow] = item.shard ? item.shard->row_offset : 0;
            e[kRows] = scalar ? 1 : item.value.toTensor().size(0);
            e[kOffset] = offset;
            e[kLength] = length;
            offset += length;
          }
        },
        options.write);
    row[0] = 1;  // this rank's part is on disk
  } catch (...) {
    failure = std::current_exception();
  }

  auto all = mine;
  if (pg && world > 1) {
    all = at::empty({world * mine.numel()}, at::kLong);
    detail::control_allgather(*pg, all, mine, options.timeout);
  }
  const auto* parts = all.data_ptr<int64_t>();
  const auto part = [&](int r) { return parts + r * (1 + n * kFields); };
  std::string failed;
  for (int r = 0; r < world; ++r) {
    if (part(r)[0] != 1) failed += (failed.empty() ? "" : ", ") + std::to_string(r);
  }
  if (failure) std::rethrow_exception(failure);
  if (!failed.empty()) {
    throw CheckpointError(where(rank, world) + "dcp_save_state_dict: rank(s) " + failed +
                          " could not write their part of " + directory +
                          " (their own errors say why); no .metadata was written");
  }

  if (rank == 0) {
    detail::dcp::Metadata m;
    m.version = detail::dcp::kDcpVersion;
    for (int64_t i = 0; i < n; ++i) {
      const auto& item = items[static_cast<size_t>(i)];
      m.planner_data[item.fqn] = item.path;
      if (!item.value.isTensor()) {
        for (int r = 0; r < world; ++r) {
          const int64_t* e = part(r) + 1 + i * kFields;
          if (e[kWritten] == 1) m.objects[item.fqn] = {file_of(r), e[kOffset], e[kLength]};
        }
        continue;
      }
      const auto& t = item.value.toTensor();
      auto& entry = m.tensors[item.fqn];
      entry.dtype = t.scalar_type();
      entry.size = item.shard ? item.shard->full_sizes : t.sizes().vec();
      for (int r = 0; r < world; ++r) {
        const int64_t* e = part(r) + 1 + i * kFields;
        if (e[kWritten] != 1) continue;
        auto chunk = chunk_of(entry.size, e[kFirstRow], e[kRows]);
        chunk.storage = {file_of(r), e[kOffset], e[kLength]};
        entry.chunks.push_back(std::move(chunk));
      }
    }
    write_file_atomically(directory + "/.metadata", detail::dcp::pickle_metadata(m));
  }
  barrier();
}

std::shared_ptr<ProcessGroup> group_of(const torch::nn::Module& module,
                                       std::shared_ptr<ProcessGroup> process_group) {
  const auto sharding_group = fsdp_process_group(module);
  if (process_group && sharding_group && process_group != sharding_group) {
    throw std::invalid_argument(
        "dcp_save_state_dict: the module is sharded over another process group than the one "
        "given; pass its own (or none)");
  }
  return process_group ? process_group : sharding_group;
}

std::unordered_map<const c10::TensorImpl*, ParameterShard> sharded(
    const std::vector<ParameterShard>& all) {
  std::unordered_map<const c10::TensorImpl*, ParameterShard> out;
  for (const auto& s : all) {
    if (s.sharded) out.emplace(s.param.unsafeGetTensorImpl(), s);
  }
  return out;
}

}  // namespace

void dcp_save_state_dict(const torch::nn::Module& module, const std::string& directory,
                         std::shared_ptr<ProcessGroup> process_group,
                         const DcpSaveOptions& options) {
  const auto pg = group_of(module, std::move(process_group));
  const auto shards = sharded(parameter_shards(module));
  std::vector<Item> items;
  add_module(items, module, options.prefix, shards);
  save_items(items, directory, pg, options);
}

void dcp_save_state_dict(const torch::nn::Module& module,
                         const torch::optim::Optimizer& optimizer, const std::string& directory,
                         std::shared_ptr<ProcessGroup> process_group,
                         const DcpSaveOptions& options) {
  detail::dcp::save_with_extras(module, optimizer, directory, std::move(process_group), options,
                                {});
}

namespace detail::dcp {

void save_with_extras(const torch::nn::Module& module, const torch::optim::Optimizer& optimizer,
                      const std::string& directory, std::shared_ptr<ProcessGroup> process_group,
                      const DcpSaveOptions& options, const std::vector<ExtraEntry>& extras) {
  const auto pg = group_of(module, std::move(process_group));
  const auto all = parameter_shards(module);
  const auto shards = sharded(all);
  std::vector<Item> items;
  add_module(items, module, options.prefix, shards);
  add_optimizer(items, optimizer, options.optimizer_prefix, all);
  for (const auto& extra : extras) {
    std::string fqn;
    for (const auto& part : extra.path) {
      fqn += (fqn.empty() ? "" : ".") + (std::holds_alternative<int64_t>(part)
                                             ? std::to_string(std::get<int64_t>(part))
                                             : std::get<std::string>(part));
    }
    items.push_back({fqn, extra.value, nullptr, extra.path});
  }
  save_items(items, directory, pg, options);
}

}  // namespace detail::dcp
}  // namespace dpx
