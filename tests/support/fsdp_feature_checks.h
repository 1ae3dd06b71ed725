// fully_shard's gradient accumulation without sync and clip_grad_norm_, each against one process
// on every rank's rows; shared by threads as ranks (tests/multirank/fsdp_features_test.cpp) and
// processes under mpirun (tests/mpi/mpi_parity_test.cpp). Each rank holds 2 rows of every
// micro-batch; a check's reference is computed once, its rank part runs on every rank.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "dpx/comm/process_group.h"
#include "support/fsdp_parity.h"

namespace dpx::test {

// Every rank's rows of step `step`'s micro-batch `micro` (float64; 6 inputs, 4 targets).
torch::Tensor feature_xs(int world, int step, int micro);
torch::Tensor feature_ys(int world, int step, int micro);
// Rank `rank`'s rows of one of them.
torch::Tensor rows_of(const torch::Tensor& t, int rank);

// Asserts equal names and values within `atol` (compared in float64).
void expect_same_state(const NamedTensors& got, const NamedTensors& want, double atol);

// Four steps of three micro-batches each, accumulated, in one process.
NamedTensors accumulation_reference(int world);
// The rank's part: the first two micro-batches under no_sync() (`guard`) or
// set_requires_gradient_sync(false), which reduce-scatter nothing; the result equals `want`.
void expect_accumulation_without_sync(const std::shared_ptr<ProcessGroup>& pg, bool guard,
                                      const NamedTensors& want);

struct ClipReference {
  NamedTensors state;
  std::vector<double> norms;  // the total norm of each step
};
// Five SGD steps, each clipped to a total norm of 0.05, in one process.
ClipReference clip_reference(int world, double norm_type);
// The rank's part: dpx::clip_grad_norm_ over sharded gradients gives the same norms and training.
void expect_clip_grad_norm(const std::shared_ptr<ProcessGroup>& pg, double norm_type,
                           const ClipReference& want);

}  // namespace dpx::test
