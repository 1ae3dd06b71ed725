// The entries of a DCP save and the two halves of writing them: each rank's file of chunks and
// objects, then the .metadata rank 0 makes from every rank's layout. The synchronous save
// (dcp_save.cpp) exchanges the layouts over the process group; the background one
// (background_save.cpp) through small files beside the parts.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dpx/checkpoint/dcp.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "checkpoint/dcp/dcp_extras.h"
#include "checkpoint/dcp/metadata.h"

namespace dpx {
class ZeroRedundancyOptimizer;
}

namespace dpx::detail::dcp {

using Path = std::vector<std::variant<std::string, int64_t>>;

// The rows [first, first + rows of the value) of dimension 0 of a tensor of `whole` sizes.
struct Rows {
  int64_t first = 0;
  std::vector<int64_t> whole;
};

// One entry of the checkpoint: a tensor (this rank's rows of a sharded one, or a replicated one,
// which one rank writes) or any other object (written by one rank, as BytesStorageMetadata).
struct Item {
  std::string fqn;
  c10::IValue value;
  std::optional<Rows> rows;  // sharded: the rows this rank holds of the whole
  Path path;                 // planner_data
  // Replicated: the rank that writes it; -1: rank i % world for the i-th entry. A rank that does
  // not write an entry may hold a meta tensor for it (Note [DCP from ZeRO] in dcp_zero.cpp).
  int writer = -1;
};

// A module's parameters by their tensor, each with its shard (fsdp_state_dict.h).
using Shards = std::unordered_map<const c10::TensorImpl*, const ParameterShard*>;

// The group a save of `module` runs on: `given`, or the one its units shard over (they must
// agree), or null (one process).
std::shared_ptr<ProcessGroup> save_group(const torch::nn::Module& module,
                                         std::shared_ptr<ProcessGroup> given);

// What dcp_save_state_dict writes, in the same order on every rank: the module's state dict
// under options.prefix, then `optimizer`'s state (when given) under options.optimizer_prefix
// (Note [DCP optimizer state] in dcp.h), then `extras`. Collective over `pg` for a
// ZeroRedundancyOptimizer (Note [DCP from ZeRO] in dcp_zero.cpp).
std::vector<Item> collect_items(const torch::nn::Module& module,
                                const torch::optim::Optimizer* optimizer,
                                const DcpSaveOptions& options,
                                const std::vector<ExtraEntry>& extras,
                                const std::shared_ptr<ProcessGroup>& pg);

// Building the optimizer's entries (dcp_save.cpp, and dcp_zero.cpp for a ZeroRedundancyOptimizer):
// `prefix` without its trailing dot, where planner_data's paths start ("optim." -> "optim");
std::string path_root(const std::string& prefix);
// the parameters of `groups` in order (Python's numbering across the groups), each with its shard;
// a tensor that is no parameter of the module is refused;
std::vector<const ParameterShard*> numbered_params(
    const std::vector<torch::optim::OptimizerParamGroup>& groups, const Shards& of);
// each of `groups` (an optimizer state dict's param_groups) as objects under `prefix`: its
// hyper-parameters, and "params" the names of params_of[g]'s parameters, found in `numbered`;
void add_param_groups(std::vector<Item>& items, const c10::IValue& groups,
                      const std::vector<torch::optim::OptimizerParamGroup>& params_of,
                      const std::vector<const ParameterShard*>& numbered,
                      const std::string& prefix);
// a ZeroRedundancyOptimizer's state, each rank writing its share's (Note [DCP from ZeRO] in
// dcp_zero.cpp); collective over `pg`.
void add_zero_optimizer(std::vector<Item>& items, const ZeroRedundancyOptimizer& zero,
                        const std::string& prefix, const Shards& of,
                        const std::shared_ptr<ProcessGroup>& pg);

// The same entries with every tensor copied to host memory (contiguous), so that training may
// change the originals while the copies are written.
std::vector<Item> snapshot(const std::vector<Item>& items);

// What a rank tells rank 0 of each entry: whether it wrote a chunk of it, the chunk's first row
// and rows, and where its bytes are. layout[0] is 1 once the rank's file is on disk.
enum LayoutField : int64_t { kWritten, kFirstRow, kRows, kOffset, kLength, kFields };
using Layout = std::vector<int64_t>;  // 1 + items * kFields
size_t layout_size(const std::vector<Item>& items);

// `directory`/__<rank>_0.distcp.
std::string part_file(int rank);

// Writes this rank's part atomically (the rows of each sharded tensor it holds, and the
// replicated entries i with i % world == rank) and returns its layout; throws what the write
// threw.
Layout write_part(const std::vector<Item>& items, const std::string& directory, int rank,
                  int world, const CheckpointWriteOptions& write);

// Refuses (a CheckpointError starting with `who`) a checkpoint some rank of which did not write
// its part: layouts[r][0] is not 1.
void check_parts_written(const std::vector<const int64_t*>& layouts, const std::string& directory,
                         const std::string& who);

// The .metadata of the checkpoint whose ranks wrote `layouts` (one per rank, every one complete).
Metadata metadata_of(const std::vector<Item>& items, const std::vector<const int64_t*>& layouts);

}  // namespace dpx::detail::dcp
