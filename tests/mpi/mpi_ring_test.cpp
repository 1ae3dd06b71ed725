// The ring all-reduce (Note [Ring all-reduce] in src/comm/backends/mpi/ring.h): several in
// flight at once, and ranks that disagree about running it. One process per rank under mpirun,
// every size. (Every dtype and op through the ring: MpiCollectives.AllreduceEveryDtypeAndOp.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "mpi/mpi_group.h"

namespace dpx::mpi_test {
namespace {

using std::chrono::milliseconds;

// Rank r's element i is (r + 1 + i % 3) * scale; the sum over w ranks, exact in float32.
at::Tensor mine(int r, std::int64_t n, int scale) {
  return (at::arange(n, at::kLong).remainder(3) + (r + 1)).to(at::kFloat) * scale;
}
at::Tensor sum(int w, std::int64_t n, int scale) {
  return (at::arange(n, at::kLong).remainder(3) * w + w * (w + 1) / 2).to(at::kFloat) * scale;
}

// 129 KiB and more: a ring at 2, 3 and 4 ranks (kRingChunkBytes).
// A rank can start the next collective's rounds while its neighbour is still in this one's;
// each tensor has values of its own, so a message matched to another collective's receive
// shows (with one tag for every round, this test crashed at 3 ranks: OpenMPI wrote a longer
// message into a shorter buffer).
TEST(MpiRing, ManyInFlight) {
  auto pg = mpi_group();
  std::vector<at::Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 24; ++i) {
    tensors.push_back(mine(pg->rank(), 33037 + 4099 * (i % 5), i + 1));
    works.push_back(pg->allreduce(tensors.back()));
  }
  for (int i = 23; i >= 0; --i) {
    works[i]->wait();
    EXPECT_TRUE(torch::equal(tensors[i], sum(pg->size(), tensors[i].numel(), i + 1))) << i;
  }
}

// DPX_MPI_RING=0 on rank 0 only: every rank must then take OpenMPI's MPI_Iallreduce (a ring
// of sends on some ranks against a collective on others would wait for ever).
TEST(MpiRing, RanksThatDisagreeAboutTheRingAllTakeMpisAllreduce) {
  if (mpi_group()->rank() == 0) ::setenv("DPX_MPI_RING", "0", 1);
  auto pg = mpi_group(milliseconds(5000));
  ::unsetenv("DPX_MPI_RING");
  for (int i = 0; i < 3; ++i) {
    auto t = mine(pg->rank(), 40009, i + 1);
    pg->allreduce(t)->wait();
    EXPECT_TRUE(torch::equal(t, sum(pg->size(), 40009, i + 1)));
  }
}

// A group destroyed while its rings are in flight: each either completed or fails with a
// DistributedError (a ring between two rounds, whose communicator is freed), and the process
// goes on with a new group. Starting the next round on the freed communicator made OpenMPI
// abort the job (MPI_ERR_COMM) at 3 ranks (at 2 the rings' two rounds were done by then). The group's barrier, issued after them, passes once every rank
// has started them (Note [MPI collective steps]), and 128 MiB of rounds outlast it.
TEST(MpiRing, AGroupDestroyedInTheMiddleOfRingsFailsThemWithoutEndingTheJob) {
  auto pg = mpi_group(milliseconds(3000));
  const int w = pg->size();
  std::vector<at::Tensor> tensors;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 0; i < 2; ++i) {
    tensors.push_back(mine(pg->rank(), 16 << 20, i + 1));
    works.push_back(pg->allreduce(tensors.back()));
  }
  pg->barrier()->wait();
  pg.reset();
  for (int i = 0; i < 2; ++i) {
    try {
      works[i]->wait();
      EXPECT_TRUE(torch::equal(tensors[i], sum(w, 16 << 20, i + 1))) << i;
    } catch (const DistributedError& e) {
      // Destroyed between two rounds here, or a peer's was: its rounds stopped.
    }
  }
  auto after = mpi_group(milliseconds(5000));
  auto one = at::ones({3});
  after->allreduce(one)->wait();
  EXPECT_TRUE(torch::equal(one, at::full({3}, after->size(), at::kFloat)));
}

}  // namespace
}  // namespace dpx::mpi_test
