// Staged collectives (Note [Staged collectives]): device tensors over a host group, threads as
// ranks. Without a GPU the staging logic runs with CPU "device" tensors (host buffers, host
// collective, copy back); the CUDA variants, and the nccl group, need a CUDA device.
#include <torch/torch.h>

#include "comm/backends/staged/process_group_staged.h"
#include "dpx/dpx.h"
#include "support/harness.h"
#include "support/side_stream.h"

namespace dpx {
namespace {

// Every collective of a group on `device`, each rank checking exact results.
void run_all_collectives(ProcessGroup& pg, at::Device device) {
  const int world = pg.size();
  const int rank = pg.rank();
  auto on = at::TensorOptions().device(device);
  auto t = at::full({1000}, double(rank + 1), on.dtype(at::kDouble));
  pg.allreduce(t)->wait();
  const double sum = world * (world + 1) / 2.0;
  EXPECT_TRUE(t.cpu().equal(at::full({1000}, sum, at::kDouble)));
  auto a = at::full({7}, float(rank + 1), on.dtype(at::kFloat));
  pg.allreduce(a, {ReduceOp::kAvg})->wait();
  EXPECT_TRUE(a.cpu().allclose(at::full({7}, float(sum / world))));
  auto m = at::full({5}, int64_t(rank), on.dtype(at::kLong));
  pg.allreduce(m, {ReduceOp::kMax})->wait();
  EXPECT_TRUE(m.cpu().equal(at::full({5}, int64_t(world - 1))));
  auto b = at::full({3, 4}, int64_t(rank * 10), on.dtype(at::kLong));
  pg.broadcast(b, {world - 1})->wait();
  EXPECT_TRUE(b.cpu().equal(at::full({3, 4}, int64_t((world - 1) * 10))));
  auto in = at::full({2, 3}, float(rank), on.dtype(at::kFloat));
  auto out = at::empty({world * 2, 3}, on.dtype(at::kFloat));
  pg.allgather(out, in)->wait();
  for (int r = 0; r < world; ++r) {
    EXPECT_TRUE(out.cpu().narrow(0, 2 * r, 2).equal(at::full({2, 3}, float(r)))) << r;
  }
  auto rs_in = at::arange(world * 4, on.dtype(at::kFloat));
  auto rs_out = at::empty({4}, on.dtype(at::kFloat));
  pg.reduce_scatter(rs_out, rs_in)->wait();
  EXPECT_TRUE(rs_out.cpu().equal(at::arange(rank * 4, rank * 4 + 4, at::kFloat) * world));
  pg.barrier()->wait();
}

// Staged shm groups of `world` threads on `device`.
std::vector<std::string> run_staged(int world, at::Device device) {
  auto store = Store::hash();
  return test::run_threads(world, [&](int rank) {
    ProcessGroup::Options o;
    o.device = device;
    auto pg = detail::make_staged_group(new_process_group("shm", store, rank, world), o);
    EXPECT_EQ(pg->backend(), "shm-staged");
    run_all_collectives(*pg, device);
  });
}

TEST(Staged, HostStagingGivesExactResultsOnThreeRanks) {
  auto errors = run_staged(3, at::kCPU);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// is_completed() has no side effects (the stall inspector calls it from its own thread): the
// result lands in the caller's tensor in wait(), on the waiting thread.
TEST(Staged, IsCompletedOnlyLooksAndWaitCopiesTheResultBack) {
  auto store = Store::hash();
  auto errors = test::run_threads(2, [&](int rank) {
    auto pg = detail::make_staged_group(new_process_group("shm", store, rank, 2), {});
    auto t = at::full({64}, float(rank + 1));
    auto work = pg->allreduce(t);
    while (!work->is_completed()) std::this_thread::yield();
    EXPECT_TRUE(t.equal(at::full({64}, float(rank + 1))));  // untouched until wait()
    work->wait();
    EXPECT_TRUE(t.equal(at::full({64}, 3.0f)));
    work->wait();  // a second wait copies nothing again
    EXPECT_TRUE(t.equal(at::full({64}, 3.0f)));
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(StagedCuda, ThreeRanksSharingOneGpuOverShm) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto errors = run_staged(3, at::Device("cuda:0"));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(StagedCuda, AutoStagesRanksThatShareAGpu) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto store = Store::hash();
  auto errors = test::run_threads(2, [&](int rank) {
    ProcessGroup::Options o;
    o.device = at::Device("cuda:0");
    auto pg = new_process_group("auto", store, rank, 2, o);
    EXPECT_EQ(pg->backend(), "shm-staged");
    run_all_collectives(*pg, o.device);
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// One rank, which reduces nothing, but is still ordered with the caller's stream: called from a
// non-default stream whose input arrives late, an out-of-place collective (all-gather,
// reduce-scatter) must start after that stream's work, or it copies NaN, and what follows on
// the stream must see its output, after synchronize() (the host goes on) as after wait().
TEST(NcclGroup, OneRankFollowsTheCallersStream) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  if (!cuda::built()) GTEST_SKIP() << "dpx built without CUDA (DPX_CUDA)";
  ProcessGroup::Options o;
  o.device = at::Device("cuda");
  auto pg = new_process_group("auto", Store::hash(), 0, 1, o);
  EXPECT_EQ(pg->backend(), "nccl");
  const at::Device device("cuda:0");
  const c10::StreamGuard on_side(test::side_stream(device));
  const auto values = at::arange(12, at::kFloat);
  auto on = at::TensorOptions().device(device);
  for (bool host_waits : {false, true}) {
    SCOPED_TRACE(host_waits ? "wait()" : "synchronize()");
    auto finish = [&](const std::shared_ptr<Work>& w) {
      host_waits ? w->wait() : w->synchronize();
    };
    auto in = test::arrives_late(values, device);
    auto gathered = at::empty({12}, on);
    finish(pg->allgather(gathered, in));
    EXPECT_TRUE((gathered + 1).cpu().equal(values + 1));
    in = test::arrives_late(values, device);
    auto scattered = at::empty({12}, on);
    finish(pg->reduce_scatter(scattered, in));
    EXPECT_TRUE((scattered * 2).cpu().equal(values * 2));
    auto t = test::arrives_late(values, device);
    finish(pg->allreduce(t, {ReduceOp::kMax}));
    EXPECT_TRUE(t.cpu().equal(values));
  }
  run_all_collectives(*pg, device);
}

// Two ranks on two GPUs, in two nccl groups on one store, both alive: each group finds its own
// NCCL id under its own round prefix (c10d keys it by communicator number, the same in both).
TEST(NcclGroup, TwoRanksOnTwoGpus) {
  if (cuda::device_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices";
  if (!cuda::built()) GTEST_SKIP() << "dpx built without CUDA (DPX_CUDA)";
  auto store = Store::hash();
  auto errors = test::run_threads(2, [&](int rank) {
    ProcessGroup::Options o;
    o.device = at::Device(at::kCUDA, static_cast<at::DeviceIndex>(rank));
    auto a = new_process_group("nccl", store, rank, 2, o);
    auto b = new_process_group("nccl", store, rank, 2, o);
    run_all_collectives(*b, o.device);
    run_all_collectives(*a, o.device);
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace dpx
