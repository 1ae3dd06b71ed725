// The names inside a sharded checkpoint (Note [Sharded checkpoint] in fsdp_checkpoint.h).
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dpx/fsdp/fsdp_state_dict.h"
#include "checkpoint/step_directory.h"

namespace dpx::detail {

constexpr const char* kShardedPrefix = "sharded-";   // sharded-<step>/: a complete checkpoint
constexpr const char* kPartialSuffix = ".partial";   // sharded-<step>.partial/: being written
// Keys of a part (one rank's torch.save file).
constexpr const char* kPartParams = "model";          // name -> this rank's shard
constexpr const char* kPartLayout = "shards";         // name -> [whole shape..., first row]
constexpr const char* kPartBuffers = "buffers";       // name -> this rank's buffer
constexpr const char* kPartOptimizer = "optimizer";   // Python's optimizer.state_dict() layout
constexpr const char* kPartOptimizerNames = "optimizer_param_names";  // index -> name

// "rank<R>-of-<N>.pt"
std::string part_name(int rank, int world);
// The world size of a part's file name; -1 for another name.
int part_world(const std::string& name);
// The complete checkpoints' folders: sharded-<step>.
inline StepDirectory sharded_folders(const std::string& directory) {
  return {directory, kShardedPrefix, ""};
}
// An empty dict of any keys and values, as Python's dict.
c10::impl::GenericDict any_dict();

// Every parameter of the optimizer by its name in the model, in the optimizer's order (the
// indices of Python's optimizer.state_dict()).
c10::List<std::string> optimizer_parameter_names(const std::vector<ParameterShard>& shards,
                                                 const torch::optim::Optimizer& optimizer);

}  // namespace dpx::detail
