// Which data path an mpi all-reduce takes by its size (src/comm/backends/mpi/sizes.h): the pair
// exchange's two ranges at 2 ranks, the ring's least size at 2, 3 and 4 ranks, and MPI's own
// all-reduce between and below them, each bound on both sides. The collectives give the same
// values whichever path they take, so only these pin the bounds. Pure: no MPI.
#include <gtest/gtest.h>

#include <cstdint>

#include "comm/backends/mpi/sizes.h"

namespace dpx::detail::mpi {
namespace {

constexpr int kOpenMpiTagUb = 0x7fffffff;  // OpenMPI 4.1's MPI_TAG_UB
constexpr int kLeastTagUb = 32767;         // the least MPI allows

// A sum or an average of 1 B to 2 KiB, and of 8 KiB to below 128 KiB, with 2 ranks.
TEST(MpiSizes, PairExchangeRangesAtTwoRanks) {
  for (const auto op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    EXPECT_FALSE(pair_sizes(0, 2, op));
    EXPECT_TRUE(pair_sizes(1, 2, op));
    EXPECT_TRUE(pair_sizes(2048, 2, op));
    EXPECT_FALSE(pair_sizes(2049, 2, op));
    EXPECT_FALSE(pair_sizes(8191, 2, op));
    EXPECT_TRUE(pair_sizes(8192, 2, op));
    EXPECT_TRUE(pair_sizes(128 * 1024 - 1, 2, op));
    EXPECT_FALSE(pair_sizes(128 * 1024, 2, op));
  }
}

// Max, min and product keep the ring (operand order matters to them, or was not measured), and
// more than 2 ranks never pair.
TEST(MpiSizes, PairExchangeOnlyForSumsAndAveragesOfTwo) {
  for (const auto op : {ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProduct}) {
    EXPECT_FALSE(pair_sizes(1024, 2, op)) << static_cast<int>(op);
    EXPECT_FALSE(pair_sizes(16 * 1024, 2, op)) << static_cast<int>(op);
  }
  for (const int size : {1, 3, 4, 8}) {
    EXPECT_FALSE(pair_sizes(1024, size, ReduceOp::kSum)) << size;
    EXPECT_FALSE(pair_sizes(16 * 1024, size, ReduceOp::kSum)) << size;
  }
}

// From 4 KiB with 2 ranks; from 32 KiB a rank's chunk with more; never for one rank.
TEST(MpiSizes, RingFromItsLeastSize) {
  EXPECT_FALSE(ring_sizes(4095, 2, kOpenMpiTagUb));
  EXPECT_TRUE(ring_sizes(4096, 2, kOpenMpiTagUb));
  for (const int size : {3, 4}) {
    EXPECT_FALSE(ring_sizes(32 * 1024 * size - 1, size, kOpenMpiTagUb)) << size;
    EXPECT_TRUE(ring_sizes(32 * 1024 * size, size, kOpenMpiTagUb)) << size;
  }
  EXPECT_FALSE(ring_sizes(1 << 30, 1, kOpenMpiTagUb));
}

// With the least MPI_TAG_UB a collective owns 31 tags (round_stride), enough for the 2(p - 1)
// rounds of up to 16 ranks; a larger group takes MPI's all-reduce. With 32 tags, 17 ranks' 32
// rounds just fit.
TEST(MpiSizes, RingOnlyWhereTheTagsHoldItsRounds) {
  EXPECT_TRUE(ring_sizes(1 << 30, 16, kLeastTagUb));
  EXPECT_FALSE(ring_sizes(1 << 30, 17, kLeastTagUb));
  EXPECT_TRUE(ring_sizes(1 << 30, 17, 32 * 1024));
  EXPECT_FALSE(ring_sizes(1 << 30, 18, 32 * 1024));
  EXPECT_TRUE(ring_sizes(1 << 30, 17, kOpenMpiTagUb));
}

}  // namespace
}  // namespace dpx::detail::mpi
