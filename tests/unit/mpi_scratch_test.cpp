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
  ASSERT_GE(a.nbytes(), 65536u);
  EXPECT_TRUE(a.is_cpu());
  void* p = a.data_ptr();
  pool.give(std::move(a));
  at::Tensor b = pool.take(65536);
  EXPECT_EQ(b.data_ptr(), p);
  at::Tensor c = pool.take(65536);  // the kept one is out: a new one
  EXPECT_NE(c.data_ptr(), p);
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
  std::vector<void*> ptrs;
  for (std::size_t i = 0; i < ScratchPool::kKept + 1; ++i) {
    out.push_back(pool.take(4096));
    ptrs.push_back(out.back().data_ptr());
  }
  for (auto& t : out) pool.give(std::move(t));
  EXPECT_EQ(pool.kept(), ScratchPool::kKept);
  // The first kKept given back are handed out again; the last was dropped.
  std::vector<void*> again;
  for (std::size_t i = 0; i < ScratchPool::kKept + 1; ++i) {
    again.push_back(pool.take(4096).data_ptr());
  }
  for (std::size_t i = 0; i < ScratchPool::kKept; ++i) {
    EXPECT_NE(std::find(again.begin(), again.end(), ptrs[i]), again.end()) << i;
  }
  ScratchPool big;
  at::Tensor huge = big.take(ScratchPool::kKeptBytes + 1);
  big.give(std::move(huge));
  EXPECT_EQ(big.kept(), 0u);
  big.give(big.take(ScratchPool::kKeptBytes));
  EXPECT_EQ(big.kept(), 1u);
}

}  // namespace
}  // namespace dpx::detail::mpi
