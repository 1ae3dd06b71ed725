// Writing a module's state dict as a DCP checkpoint (dcp.h): each rank its file of chunks, the
// layout gathered, rank 0's .metadata last.
#include <unistd.h>

#include <exception>
#include <unordered_map>

#include "dpx/checkpoint/dcp.h"
#include "dpx/errors.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/runtime/files.h"
#include "checkpoint/dcp/metadata.h"
#include "checkpoint/python_format/torch_file.h"
#include "comm/coordination/control.h"

namespace dpx {
namespace {

// What each rank tells rank 0 of each state-dict entry (in state_dict() order, the same on every
// rank): whether it wrote a chunk of it, the chunk's first row and rows, and where its bytes are.
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

}  // namespace

void dcp_save_state_dict(const torch::nn::Module& module, const std::string& directory,
                         std::shared_ptr<ProcessGroup> process_group,
                         const DcpSaveOptions& options) {
  const auto sharding_group = fsdp_process_group(module);
  if (process_group && sharding_group && process_group != sharding_group) {
    throw std::invalid_argument(
        "dcp_save_state_dict: the module is sharded over another process group than the one "
        "given; pass its own (or none)");
  }
  const auto pg = process_group ? process_group : sharding_group;
  const int rank = pg ? pg->rank() : 0, world = pg ? pg->size() : 1;
  const auto barrier = [&] {
    if (pg && world > 1) pg->barrier()->wait(options.timeout);
  };

  std::unordered_map<const c10::TensorImpl*, ParameterShard> shards;
  for (auto& s : parameter_shards(module)) {
    if (s.sharded) shards.emplace(s.param.unsafeGetTensorImpl(), std::move(s));
  }
  const auto entries = state_dict(module);
  const auto n = static_cast<int64_t>(entries.size());

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
            const auto& t = entries[static_cast<size_t>(i)].second;
            int64_t* e = row + 1 + i * kFields;
            const auto shard = shards.find(t.unsafeGetTensorImpl());
            if (shard == shards.end() && i % world != rank) continue;  // another rank writes it
            int64_t length = 0;
            detail::torch_save_to(t.detach(), [&](const char* data, size_t size) {
              sink(data, size);
              length += static_cast<int64_t>(size);
            });
            e[kWritten] = 1;
            e[kFirstRow] = shard == shards.end() ? 0 : shard->second.row_offset;
            e[kRows] = t.dim() == 0 ? 1 : t.size(0);
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
      const auto& [name, t] = entries[static_cast<size_t>(i)];
      const std::string fqn = options.prefix + name;
      auto shard = shards.find(t.unsafeGetTensorImpl());
      auto& entry = m.tensors[fqn];
      entry.dtype = t.scalar_type();
      entry.size = shard == shards.end() ? t.sizes().vec() : shard->second.full_sizes;
      for (int r = 0; r < world; ++r) {
        const int64_t* e = part(r) + 1 + i * kFields;
        if (e[kWritten] != 1) continue;
        auto chunk = chunk_of(entry.size, e[kFirstRow], e[kRows]);
        chunk.storage = {file_of(r), e[kOffset], e[kLength]};
        entry.chunks.push_back(std::move(chunk));
      }
      const std::string top = options.prefix.empty() || options.prefix.back() != '.'
                                  ? ""
                                  : options.prefix.substr(0, options.prefix.size() - 1);
      m.planner_data[fqn] = top.empty() || top.find('.') != std::string::npos
                                ? std::vector<std::string>{fqn}
                                : std::vector<std::string>{top, name};
    }
    write_file_atomically(directory + "/.metadata", detail::dcp::pickle_metadata(m));
  }
  barrier();
}

}  // namespace dpx
