// The mpi backend's scratch buffers (Note [Scratch reuse] in src/comm/backends/mpi/scratch.h):
// a buffer given back is handed out again, the smallest that fits, and the pool keeps no more
// than it says. Pure: no MPI.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "comm/backends/mpi/scratch.h"

namespace dpx::detail::mpi {
namespace {

TEST(MpiScratch, ABufferGivenBackIsHandedOutAgain) {
  ScratchPool pool;
  at::Tensor a = pool.take(65536);
  ASSERT_EQ(a.nbytes(), 65536u);
  EXPECT_TRUE(a.is_cpu());
  pool.give(std::move(a));
  EXPECT_EQ(pool.kept(), 1u);
  // The kept one (its size tells it from a new one), and then none is left.
  EXPECT_EQ(pool.take(4096).nbytes(), 65536u);
  EXPECT_EQ(pool.kept(), 0u);
  EXPECT_EQ(pool.take(4096).nbytes(), 4096u);
}

TEST(MpiScratch, TheSmallestKeptBufferThatFitsAndNoneTooSmall) {
  ScratchPool pool;
  at::Tensor small = pool.take(8192);
  at::Tensor large = pool.take(1 << 20);
  at::Tensor middle = pool.take(65536);
  void* s = small.data_ptr();
  void* l = large.data_ptr();
  void* m = middle.data_ptr();
  pool.give(std::move(large));
  pool.give(std::move(small));
  pool.give(std::move(middle));
  EXPECT_EQ(pool.take(40000).data_ptr(), m);
  EXPECT_EQ(pool.take(4096).data_ptr(), s);
  at::Tensor bigger = pool.take((1 << 20) + 1);  // nothing kept fits
  EXPECT_GE(bigger.nbytes(), static_cast<std::size_t>((1 << 20) + 1));
  EXPECT_NE(bigger.data_ptr(), l);
  EXPECT_EQ(pool.take(1 << 20).data_ptr(), l);
}

TEST(MpiScratch, KeepsAtMostItsCountAndNothingOverItsBound) {
  ScratchPool pool;
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < ScratchPool::kKept + 1; ++i) out.push_back(pool.take(4096));
  for (auto& t : out) pool.give(std::move(t));
  EXPECT_EQ(pool.kept(), ScratchPool::kKept);
  ScratchPool big;
  big.give(big.take(ScratchPool::kKeptBytes + 1));
  EXPECT_EQ(big.kept(), 0u);
  big.give(big.take(ScratchPool::kKeptBytes));
  EXPECT_EQ(big.kept(), 1u);
}

// Full of small buffers (the pair's), a ring's larger one given back replaces the smallest, and
// is handed out for the next ring; a smaller one than every kept one is dropped.
TEST(MpiScratch, ALargerBufferReplacesTheSmallestWhenFull) {
  ScratchPool pool;
  std::vector<at::Tensor> out;
  for (std::size_t i = 0; i < ScratchPool::kKept; ++i) out.push_back(pool.take(1024 + 8 * i));
  for (auto& t : out) pool.give(std::move(t));
  pool.give(pool.take(1 << 20));  // made new: none kept fits
  EXPECT_EQ(pool.kept(), ScratchPool::kKept);
  at::Tensor ring = pool.take(65536);
  EXPECT_EQ(ring.nbytes(), static_cast<std::size_t>(1 << 20));
  pool.give(std::move(ring));
  pool.give(at::empty({1000}, at::kByte));  // full again, and smaller than every kept one
  std::vector<std::size_t> sizes;
  while (pool.kept() > 0) sizes.push_back(pool.take(1).nbytes());
  std::sort(sizes.begin(), sizes.end());
  // 1024 went for the ring's; 1000 was not kept.
  EXPECT_EQ(sizes, (std::vector<std::size_t>{1032, 1040, 1048, 1 << 20}));
}

}  // namespace
}  // namespace dpx::detail::mpi
