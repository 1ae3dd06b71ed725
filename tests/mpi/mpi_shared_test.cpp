// DDP's buckets in memory every rank of an mpi group maps (Note [Shared buckets over MPI] in
// src/comm/backends/mpi/shared.h): all-reduces in place in rank order, a tensor at another
// place on one rank, and a rank that does not want it. One process per rank under mpirun, every
// size, on one host; across the namespace hosts of mpi.two_hosts no rank may get the memory.
// (DDP on it: the conformance suite's mpi instances.)
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <csignal>
#include <cstdlib>
#include <vector>

#include "comm/plan/placement.h"
#include "comm/shared_memory.h"
#include "mpi/mpi_group.h"

namespace dpx::mpi_test {
namespace {

at::Tensor shared_memory(ProcessGroup& pg, std::size_t bytes) {
  auto* shared = dynamic_cast<detail::SharedMemory*>(&pg);
  if (shared == nullptr) return {};
  return shared->allocate_shared(bytes);
}

// Whether every rank of `pg` runs on one host, in one pid namespace (told apart as the backend
// does: detail::host_identity()).
bool one_host(ProcessGroup& pg) {
  const auto id = [](const std::string& s) {
    return static_cast<std::int64_t>(std::hash<std::string>()(s));
  };
  at::Tensor mine = at::tensor({id(detail::host_identity()), id(detail::namespace_of("pid"))});
  at::Tensor all = at::empty({2 * pg.size()}, at::kLong);
  pg.allgather(all, mine)->wait();
  return torch::equal(all.view({pg.size(), 2}), mine.view({1, 2}).expand({pg.size(), 2}));
}

// Shared memory where the group is on one host, none elsewhere; true where there is some.
bool shared_where_expected(ProcessGroup& pg, const at::Tensor& memory) {
  const bool expected = one_host(pg);
  EXPECT_EQ(memory.defined(), expected) << (expected ? "one host: the group should give shared "
                                            "memory" : "several hosts: no shared memory");
  return expected && memory.defined();
}

// `numel` elements of `dtype` at `offset` bytes into `memory`.
at::Tensor view(const at::Tensor& memory, std::size_t offset, std::int64_t numel,
                at::ScalarType dtype) {
  return at::from_blob(static_cast<char*>(memory.data_ptr()) + offset, {numel},
                       at::TensorOptions().dtype(dtype));
}

// Every rank's values, reduced in rank order as the shared path does (x0 op x1 op ...).
at::Tensor fold(ProcessGroup& pg, const at::Tensor& mine, ReduceOp op) {
  at::Tensor all = at::empty({pg.size() * mine.numel()}, mine.options());
  pg.allgather(all, mine)->wait();
  at::Tensor acc = all.narrow(0, 0, mine.numel()).clone();
  for (int q = 1; q < pg.size(); ++q) {
    const at::Tensor x = all.narrow(0, q * mine.numel(), mine.numel());
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc = acc + x; break;
      case ReduceOp::kProduct: acc = acc * x; break;
      case ReduceOp::kMin: acc = at::minimum(acc, x); break;
      case ReduceOp::kMax: acc = at::maximum(acc, x); break;
    }
  }
  if (op == ReduceOp::kAvg) acc.div_(pg.size());
  return acc;
}

// Several all-reduces in flight at once, each in its own part of the memory, every dtype DDP's
// buckets take and several ops, sizes whose slices cut into several 1 MiB segments at 2-4
// ranks: each equals every rank's values reduced in rank order, bit for bit, whichever rank
// reduced which slice.
TEST(MpiSharedBuckets, AllreducesInPlaceInRankOrder) {
  auto pg = mpi_group();
  const int r = pg->rank();
  at::Tensor memory = shared_memory(*pg, 24 << 20);
  if (!shared_where_expected(*pg, memory)) return;
  struct Case {
    std::int64_t numel;
    at::ScalarType dtype;
    ReduceOp op;
  };
  const std::vector<Case> cases = {
      {1200007, at::kFloat, ReduceOp::kSum},  {3000017, at::kFloat, ReduceOp::kAvg},
      {786431, at::kBFloat16, ReduceOp::kSum}, {400009, at::kDouble, ReduceOp::kMax},
      {65, at::kHalf, ReduceOp::kSum},         {300007, at::kLong, ReduceOp::kMin},
      {5, at::kFloat, ReduceOp::kProduct}};
  std::vector<at::Tensor> in_place;
  std::vector<at::Tensor> inputs;
  std::vector<std::shared_ptr<Work>> works;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    at::Tensor t = view(memory, offset, c.numel, c.dtype);
    // Values of this rank's own, not exact in every dtype: both paths must round alike.
    t.copy_(at::randn({c.numel}, at::TensorOptions().dtype(at::kDouble))
                .mul_(3 + r + static_cast<int>(i)).to(c.dtype));
    inputs.push_back(t.clone());
    in_place.push_back(t);
    works.push_back(pg->allreduce(t, {c.op}));
    offset += (t.nbytes() + 63) / 64 * 64;
  }
  ASSERT_LE(offset, std::size_t{24} << 20);
  for (auto& w : works) w->wait();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const at::Tensor expected = fold(*pg, inputs[i], cases[i].op);
    EXPECT_TRUE(torch::equal(in_place[i], expected))
        << "case " << i << ": " << cases[i].numel << " " << cases[i].dtype << ", max difference "
        << (in_place[i].to(at::kDouble) - expected.to(at::kDouble)).abs().max();
  }
  // Every rank ends with the same bits.
  at::Tensor first = in_place[0].clone();
  pg->broadcast(first, {0})->wait();
  EXPECT_TRUE(torch::equal(first, in_place[0]));
}

// Rank 0's tensor lies 64 bytes from the others': MismatchError on every rank, no bytes move,
// and the group goes on.
TEST(MpiSharedBuckets, ATensorAtAnotherPlaceOnOneRankIsAMismatch) {
  auto pg = mpi_group();
  at::Tensor memory = shared_memory(*pg, 1 << 20);
  if (!shared_where_expected(*pg, memory)) return;
  at::Tensor t = view(memory, pg->rank() == 0 ? 0 : 64, 1000, at::kFloat);
  t.fill_(pg->rank() + 1);
  EXPECT_THROW(pg->allreduce(t)->wait(), MismatchError);
  EXPECT_TRUE(torch::equal(t, at::full({1000}, pg->rank() + 1.0f)));
  at::Tensor u = view(memory, 128, 1000, at::kFloat);
  u.fill_(1);
  pg->allreduce(u)->wait();
  EXPECT_TRUE(torch::equal(u, at::full({1000}, static_cast<float>(pg->size()))));
}

// Two blocks, as two DDP models make: rank 0's tensor at an offset of the first, the others' at
// the same offset of the second. MismatchError naming both blocks, not each rank reducing
// with another model's bucket.
TEST(MpiSharedBuckets, TheSameOffsetInAnotherBlockIsAMismatch) {
  auto pg = mpi_group();
  at::Tensor first = shared_memory(*pg, 1 << 16);
  at::Tensor second = shared_memory(*pg, 1 << 16);
  if (!shared_where_expected(*pg, first)) return;
  ASSERT_TRUE(second.defined());
  at::Tensor t = view(pg->rank() == 0 ? first : second, 256, 100, at::kFloat);
  t.fill_(pg->rank() + 1);
  try {
    pg->allreduce(t)->wait();
    ADD_FAILURE() << "no MismatchError";
  } catch (const MismatchError& e) {
    EXPECT_NE(std::string(e.what()).find("block 2"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(torch::equal(t, at::full({100}, pg->rank() + 1.0f)));
}

// DPX_MPI_SHARED_BUCKETS=0 on rank 0 only: no rank gets shared memory (a rank that skipped the
// set-up alone would leave the others waiting in it).
TEST(MpiSharedBuckets, ARankThatDoesNotWantItKeepsEveryRankPrivate) {
  if (mpi_group()->rank() == 0) ::setenv("DPX_MPI_SHARED_BUCKETS", "0", 1);
  auto pg = mpi_group();
  ::unsetenv("DPX_MPI_SHARED_BUCKETS");
  EXPECT_FALSE(shared_memory(*pg, 1 << 20).defined());
  auto next = mpi_group();  // the next group's setting is its own
  shared_where_expected(*next, shared_memory(*next, 1 << 20));
}

// Rank 0 cannot make the memory: a file size limit of 1 MiB makes its memory file's sizing fail
// (EFBIG). By default every rank then keeps private buckets, and the all-reduce still sums;
// with DPX_MPI_SHARED_BUCKETS=1 on one rank, every rank raises the same error instead.
TEST(MpiSharedBuckets, MemoryRankZeroCannotMakeFallsBackUnlessAskedFor) {
  auto pg = mpi_group();
  if (!one_host(*pg)) GTEST_SKIP() << "several hosts: no shared memory to make";
  rlimit before{};
  ::getrlimit(RLIMIT_FSIZE, &before);
  auto* sigxfsz = std::signal(SIGXFSZ, SIG_IGN);  // else growing past the limit ends the process
  if (pg->rank() == 0) {
    rlimit small = before;
    small.rlim_cur = 1 << 20;
    ::setrlimit(RLIMIT_FSIZE, &small);
  }
  EXPECT_FALSE(shared_memory(*pg, 4 << 20).defined());
  at::Tensor t = at::ones({1000});
  pg->allreduce(t)->wait();
  EXPECT_TRUE(torch::equal(t, at::full({1000}, static_cast<float>(pg->size()))));
  if (pg->rank() == pg->size() - 1) ::setenv("DPX_MPI_SHARED_BUCKETS", "1", 1);
  auto asked = mpi_group();
  ::unsetenv("DPX_MPI_SHARED_BUCKETS");
  try {
    shared_memory(*asked, 4 << 20);
    ADD_FAILURE() << "no error";
  } catch (const DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 could not make"), std::string::npos) << e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, sigxfsz);
  EXPECT_TRUE(shared_memory(*asked, 4 << 20).defined()) << "the limit gone, the memory comes";
}

}  // namespace
}  // namespace dpx::mpi_test
