// fully_shard, ZeroRedundancyOptimizer and SyncBatchNorm on the mpi backend, one process per
// rank under mpirun: the same parity checks as threads as ranks run on shm and gloo
// (support/fsdp_parity.h, fsdp_feature_checks.h, zero_parity.h, sync_batch_norm_parity.h), at
// whatever world size mpirun started.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "mpi/mpi_group.h"
#include "support/fsdp_feature_checks.h"
#include "support/fsdp_parity.h"
#include "support/sync_batch_norm_parity.h"
#include "support/zero_parity.h"

namespace dpx::mpi_test {
namespace {

// Float64 training on each rank's slice equals one process on the whole batch, with SGD and with
// AdamW and a tied parameter; keeping parameters gathered after forward changes how often
// fully_shard all-gathers, never the result.
TEST(MpiFsdp, TrainsAsOneProcessOnTheWholeBatch) {
  auto pg = mpi_group();
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "AdamW, tied" : "SGD");
    const auto make = tied ? test::adamw : test::sgd;
    const auto data = test::make_fsdp_parity_data(pg->size(), tied);
    const auto want = test::train_one_process(tied, data, make);
    const auto issued = test::train_sharded_and_compare(pg, tied, data, make, want);
    FullyShardOptions keep;
    keep.reshard_after_forward = false;
    EXPECT_LT(test::train_sharded_and_compare(pg, tied, data, make, want, keep), issued);
  }
}

// Micro-batches under no_sync() or set_requires_gradient_sync(false) reduce-scatter nothing and
// accumulate as one process does; clip_grad_norm_ over the shards clips by the global norm.
TEST(MpiFsdp, AccumulationWithoutSyncAndClipGradNorm) {
  auto pg = mpi_group();
  const auto accumulated = test::accumulation_reference(pg->size());
  for (bool guard : {true, false}) test::expect_accumulation_without_sync(pg, guard, accumulated);
  for (double norm_type : {2.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE("norm_type " + std::to_string(norm_type));
    test::expect_clip_grad_norm(pg, norm_type, test::clip_reference(pg->size(), norm_type));
  }
}

TEST(MpiZero, SameParametersAsTheUnshardedOptimizer) {
  auto pg = mpi_group();
  const auto net = test::zero_net();
  for (const auto& c : test::zero_optimizers()) {
    SCOPED_TRACE(c.name);
    test::expect_zero_matches(pg, c, net, test::zero_reference(c, net));
  }
}

// Even batches; uneven ones; rank 1 without samples (and the cumulative average).
std::vector<test::SbnCase> sbn_cases(int world) {
  std::vector<test::SbnCase> out;
  out.push_back({std::vector<int64_t>(world, 4), 0.1});
  std::vector<int64_t> uneven, empty;
  for (int r = 0; r < world; ++r) {
    uneven.push_back(2 + 3 * r % 5);
    empty.push_back(r == 1 ? 0 : 3 + r);
  }
  out.push_back({uneven, 0.3});
  out.push_back({empty, std::nullopt});
  return out;
}

TEST(MpiSyncBatchNorm, MatchesBatchNormOnTheWholeBatch) {
  auto pg = mpi_group();
  for (const auto& c : sbn_cases(pg->size())) {
    SCOPED_TRACE("rank 1 holds " + std::to_string(c.batch[1]) + " samples");
    const auto data = test::sbn_data(c);
    const auto got = test::sync_batch_norm_on_rank(pg, c, data);
    const auto want = test::batch_norm_on_the_whole_batch(c, data);
    test::expect_rank_matches(got, want, c, pg->rank());
    auto weight_grad = test::grad_or_zeros(got.grad_weight).clone();
    auto bias_grad = test::grad_or_zeros(got.grad_bias).clone();
    pg->allreduce(weight_grad)->wait();
    pg->allreduce(bias_grad)->wait();
    test::expect_affine_grads_match(weight_grad, bias_grad, want);
  }
}

}  // namespace
}  // namespace dpx::mpi_test
