// fully_shard's features besides plain training, shared by threads as ranks
// (tests/multirank/fsdp_features_test.cpp) and processes under mpirun
// (tests/mpi/mpi_fsdp_features_test.cpp): gradient accumulation without sync, clip_grad_norm_,
// autocast with GradScaler, bfloat16 parameters, evaluation between iterations, wrapping mistakes
// and the full optimizer state dict. Each rank holds 2 rows of every micro-batch; a check's
// reference is computed once, its rank part runs on every rank, at any world size.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
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

// Why autocast cannot run with this LibTorch (1.x), or nullopt.
std::optional<std::string> autocast_unsupported();
// The rank's part: five steps under CPU bfloat16 autocast and GradScaler, rank 0's loss inf at
// step 2; fully_shard's scales and training equal DDP's over the same group.
void expect_autocast_and_grad_scaler_as_under_ddp(const std::shared_ptr<ProcessGroup>& pg);

// Three float32 SGD steps on every rank's rows in one process.
NamedTensors param_dtype_reference(int world);
// The rank's part: MixedPrecisionPolicy{param_dtype = bfloat16} computes in bfloat16 and steps
// in float32, near `want` but not equal to it.
void expect_param_dtype_bfloat16(const std::shared_ptr<ProcessGroup>& pg, const NamedTensors& want);

// The rank's part: every parameter holds its shard between iterations and after a forward under
// no_grad, whose output is the unsharded model's.
void expect_sharded_between_iterations(const std::shared_ptr<ProcessGroup>& pg);

// The rank's part: fully_shard applied top-down or twice, and clip_grad_norm_ on an unsharded
// model, fail with messages that say what to do.
void expect_wrapping_mistakes_explained(const std::shared_ptr<ProcessGroup>& pg);
// The rank's part: a unit reached around its handle fails the first forward with dpx's message
// naming it, not with a kernel's shape error.
void expect_unit_called_around_its_handle_named(const std::shared_ptr<ProcessGroup>& pg);

// The rank's part, with float64 the default dtype (the caller sets it, for every rank at once):
// rank 0's full optimizer state dict has PyTorch's types and param-group keys.
void expect_full_optimizer_state_dict_as_pythons(const std::shared_ptr<ProcessGroup>& pg);

}  // namespace dpx::test
