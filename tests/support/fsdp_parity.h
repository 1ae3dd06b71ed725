// The fully_shard parity check, shared by threads as ranks (tests/multirank/fsdp_parity_test.cpp)
// and processes under mpirun (tests/mpi/mpi_parity_test.cpp): each rank trains its slice of every
// step's batch under fully_shard, and its full state dict must equal one process's training on
// the whole batch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dpx/comm/process_group.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/fsdp_models.h"

namespace dpx::test {

struct FsdpParityData {
  std::vector<torch::Tensor> x, y;  // per step, the whole batch (3 samples per rank), float64
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;
using FsdpSetup = std::function<void(FSDPModule<ShardNetImpl>&)>;

FsdpParityData make_fsdp_parity_data(int world, bool tied);

// ShardNet trained on the whole batch of every step in this one process.
NamedTensors train_one_process(bool tied, const FsdpParityData& data, const MakeOptimizer& make);

// Rank `pg.rank()`'s part: trains a sharded ShardNet on its slice of every step, then expects its
// full state dict to equal `want` (float64: within 1e-12). Returns the collectives it issued
// in training.
std::uint64_t train_sharded_and_compare(const std::shared_ptr<ProcessGroup>& pg, bool tied,
                                        const FsdpParityData& data, const MakeOptimizer& make,
                                        const NamedTensors& want,
                                        const FullyShardOptions& options = {},
                                        const FsdpSetup& setup = nullptr);

}  // namespace dpx::test
