// The state of a sharded module, whole or in shards: what checkpoints save and load
// (dpx/checkpoint/fsdp_checkpoint.h writes them to files).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx {

struct FullStateDictOptions {
  // Only rank 0 receives the state dict (the others get an empty one), as FSDP2's
  // StateDictOptions(full_state_dict=True, cpu_offload=True) leaves it. false: every rank.
  bool rank0_only = true;
};

// Python's module.state_dict() of the unsharded module: every parameter (tied ones under each
// of their names) gathered whole, and the buffers as this rank holds them. Collective (one
// all-gather per sharded parameter); call it between iterations.
std::vector<std::pair<std::string, at::Tensor>> full_state_dict(
    const torch::nn::Module& module, const FullStateDictOptions& options = {});

// Copies a full state dict (e.g. one saved from an unsharded module) into a sharded module:
// each rank keeps its rows of each parameter. Every parameter and buffer of the module must be
// in `state`, with its whole shape; extra entries are an error too (Python's strict loading).
void load_full_state_dict(torch::nn::Module& module,
                          const std::vector<std::pair<std::string, at::Tensor>>& state);

// One parameter as this rank holds it: rows [row_offset, row_offset + shard.size(0)) of dim 0
// of a tensor of `full_sizes`. A parameter that no unit shards has row_offset 0 and all rows.
struct ParameterShard {
  std::string name;  // under `module`, the first of a tied parameter's names
  at::Tensor param;  // the parameter itself (it holds the shard between iterations)
  std::vector<int64_t> full_sizes;
  int64_t row_offset = 0;
  bool sharded = false;  // held by a unit (its rows may still be all of them, or none)
};

// The parameters of `module` with their shards, in named_parameters() order, each once.
std::vector<ParameterShard> parameter_shards(const torch::nn::Module& module);

// The process group `module`'s units shard over; null when no module in it is sharded.
std::shared_ptr<ProcessGroup> fsdp_process_group(const torch::nn::Module& module);

}  // namespace dpx
