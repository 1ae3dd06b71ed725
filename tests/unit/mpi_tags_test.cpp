// The mpi backend's message tags (Note [Group epochs] in src/comm/backends/mpi/tags.h) for the
// MPI_TAG_UB of the least an MPI may offer, of MPICH 4.0 and of OpenMPI 4.1: every tag fits
// under it, and the tags of neighbouring collectives and epochs stay apart, across the uint32
// wrap of a group's collective numbers too. Pure: no MPI.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <unordered_set>

#include "comm/backends/mpi/tags.h"

namespace dpx::detail::mpi {
namespace {

constexpr std::uint32_t kLast = std::numeric_limits<std::uint32_t>::max();

class MpiTags : public ::testing::TestWithParam<int> {};

TEST_P(MpiTags, EveryRoundOfEveryCollectiveFitsAndOwnsItsStride) {
  const int ub = GetParam();
  const int stride = round_stride(ub);
  ASSERT_GE(stride, 31) << "too few rounds for a ring of more than a few ranks";
  // Each (epoch, collective) owns [first, first + stride): distinct starts a stride apart.
  std::set<int> firsts;
  for (std::uint32_t epoch = 0; epoch < kRoundEpochs; ++epoch) {
    for (std::uint32_t seq = 0; seq < kRoundCollectives; ++seq) {
      const int first = round_tag(epoch, seq, 0, ub);
      ASSERT_GE(first, 0);
      ASSERT_LE(first + stride - 1, ub) << "epoch " << epoch << ", collective " << seq;
      ASSERT_EQ(round_tag(epoch, seq, stride - 1, ub), first + stride - 1);
      ASSERT_EQ(first % stride, 0);
      firsts.insert(first);
    }
  }
  // Under the least MPI_TAG_UB only the collectives are kept apart, not the epochs.
  const std::size_t epochs = ub / (kRoundCollectives * kRoundEpochs) >= 64 ? kRoundEpochs : 1;
  EXPECT_EQ(firsts.size(), epochs * kRoundCollectives);
  // The uint32 numbers wrap onto the next tag, not onto the one just used.
  EXPECT_NE(round_tag(7, kLast, 0, ub), round_tag(7, 0, 0, ub));
  EXPECT_EQ(round_tag(7, kLast, 0, ub), round_tag(7, kRoundCollectives - 1, 0, ub));
  EXPECT_LE(round_tag(kLast, kLast, stride - 1, ub), ub);
  if (epochs > 1) {
    EXPECT_NE(round_tag(kLast, 5, 0, ub), round_tag(0, 5, 0, ub));
    EXPECT_NE(round_tag(3, 5, 0, ub), round_tag(4, 5, 0, ub));
  }
}

TEST_P(MpiTags, DescriptorsOfNeighbouringEpochsAndCollectivesDiffer) {
  const int ub = GetParam();
  const auto epochs = static_cast<std::uint32_t>((static_cast<std::int64_t>(ub) + 1) / 32768);
  std::unordered_set<int> seen;
  for (std::uint32_t epoch : {0U, 1U, 2U, epochs - 1}) {
    for (std::uint32_t seq = 0; seq < 32768; ++seq) {
      const int tag = check_tag(epoch, seq, ub);
      ASSERT_GE(tag, 0);
      ASSERT_LE(tag, ub) << "epoch " << epoch << ", collective " << seq;
      seen.insert(tag);
    }
  }
  // Four epochs apart where MPI_TAG_UB leaves room for them; one where it does not.
  EXPECT_EQ(seen.size(), (epochs >= 4 ? 4U : 1U) * 32768U);
  EXPECT_NE(check_tag(9, kLast, ub), check_tag(9, 0, ub));
  EXPECT_LE(check_tag(kLast, kLast, ub), ub);
  if (epochs > 1) EXPECT_NE(check_tag(kLast, 3, ub), check_tag(0, 3, ub));
}

INSTANTIATE_TEST_SUITE_P(TagUb, MpiTags,
                         ::testing::Values(32767, (1 << 28) - 1,
                                           std::numeric_limits<std::int32_t>::max()),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "ub" + std::to_string(info.param);
                         });

}  // namespace
}  // namespace dpx::detail::mpi
