// fully_shard when a rank stops taking part, on the mpi backend under mpirun: the others' step
// ends in TimeoutError (a DistributedError, as tests/multiproc/fsdp_faults_test.cpp asks of shm
// and gloo for a killed rank) within the group's timeout, never a hang. A killed rank is not
// tested here: OpenMPI's mpirun ends the whole job then (CTest mpi.killed_rank). These join
// MpiFaults.* in CTest's mpi.npN.faults (one mpirun per world size, apart from the rest).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <string>

#include "mpi/mpi_group.h"
#include "support/expect_throws.h"
#include "support/fsdp_models.h"

namespace dpx::mpi_test {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

enum class Stops { kBeforeForward, kAfterForward };

// Every rank trains a step; then the last rank skips the next one (`stops` says where): the
// others' forward (its all-gathers) or backward (with parameters kept after forward, its first
// collective is a reduce-scatter) must fail with TimeoutError naming that collective, within
// the 1 s timeout and a margin. Then every rank goes on with a new group.
void expect_timeout_when_a_rank_stops(Stops stops, const std::string& collective) {
  const int world = mpi_group()->size();
  if (world < 2) GTEST_SKIP() << "needs a peer that stops";
  {
    auto pg = mpi_group(milliseconds(1000));
    auto net = test::make_shard_net(false, torch::kFloat);
    FullyShardOptions options;
    options.reshard_after_forward = stops == Stops::kBeforeForward;
    auto model = test::shard(net, pg, options);
    const auto x = torch::randn({3, 6}) + pg->rank();
    model(x).square().mean().backward();  // every rank takes part once
    if (pg->rank() == world - 1) {
      if (stops == Stops::kAfterForward) model(x).square().mean();
    } else {
      const auto t0 = Clock::now();
      const auto msg = test::expect_throws<TimeoutError>(
          [&] { model(x).square().mean().backward(); });
      const double took = std::chrono::duration<double>(Clock::now() - t0).count();
      EXPECT_NE(msg.find(collective), std::string::npos) << msg;
      EXPECT_GT(took, 0.9) << msg;
      EXPECT_LT(took, 3.0) << msg;
    }
  }
  auto next = mpi_group();
  auto t = at::ones({2});
  next->allreduce(t)->wait();
  EXPECT_TRUE(torch::equal(t, at::full({2}, world, at::kFloat)));
}

TEST(MpiFaults, FullyShardRankThatStopsBeforeForwardEndsTheAllGatherInTimeoutError) {
  expect_timeout_when_a_rank_stops(Stops::kBeforeForward, "allgather");
}

TEST(MpiFaults, FullyShardRankThatStopsAfterForwardEndsTheReduceScatterInTimeoutError) {
  expect_timeout_when_a_rank_stops(Stops::kAfterForward, "reduce_scatter");
}

}  // namespace
}  // namespace dpx::mpi_test
