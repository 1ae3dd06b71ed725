// The SyncBatchNorm parity check, shared by threads as ranks
// (tests/multirank/sync_batch_norm_test.cpp) and processes under mpirun
// (tests/mpi/mpi_parity_test.cpp): two training steps of SyncBatchNorm on each rank's rows give
// the outputs, input gradients and running statistics of plain BatchNorm2d on the whole batch,
// and the ranks' weight and bias gradients sum to BatchNorm2d's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "dpx/comm/process_group.h"

namespace dpx::test {

struct SbnCase {
  std::vector<int64_t> batch;  // samples per rank (one entry per rank)
  std::optional<double> momentum;
};

struct SbnData {
  torch::Tensor x, g;  // the whole batch, float64, and the gradient its output receives
};

// A rank without samples has undefined weight and bias gradients (PyTorch: None); BatchNorm2d's
// result holds every row.
struct SbnResult {
  torch::Tensor out, grad_input, grad_weight, grad_bias, running_mean, running_var;
};

SbnData sbn_data(const SbnCase& c);

// SyncBatchNorm over `pg` on rank pg->rank()'s rows.
SbnResult sync_batch_norm_on_rank(const std::shared_ptr<ProcessGroup>& pg, const SbnCase& c,
                                  const SbnData& data);

// Plain BatchNorm2d on every row in this process.
SbnResult batch_norm_on_the_whole_batch(const SbnCase& c, const SbnData& data);

// Rank `rank`'s output and input gradient equal its rows of `want`'s; its running statistics
// equal `want`'s.
void expect_rank_matches(const SbnResult& got, const SbnResult& want, const SbnCase& c, int rank);

// The sum of the ranks' weight (bias) gradients equals `want`'s.
void expect_affine_grads_match(const torch::Tensor& weight_grad_sum,
                               const torch::Tensor& bias_grad_sum, const SbnResult& want);

// A rank's gradient, or zeros where it has none.
torch::Tensor grad_or_zeros(const torch::Tensor& grad);

}  // namespace dpx::test
