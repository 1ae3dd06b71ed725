// ZeroRedundancyOptimizer against the unsharded optimizer: the same parameters, bit for bit.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "support/expect_throws.h"
#include "support/harness.h"
#include "support/zero_parity.h"
#include "algorithms/zero_partition.h"

namespace dpx::zero_redundancy_optimizer_test {
namespace {

using test::copy_params;

torch::nn::Sequential make_net() { return test::zero_net(); }

class ZeroParity
    : public ::testing::TestWithParam<std::tuple<test::ZeroCase, std::string, int>> {};

// Every rank's parameters equal the unsharded optimizer's exactly (support/zero_parity.h).
TEST_P(ZeroParity, SameParametersAsTheUnshardedOptimizer) {
  const auto& [c, backend, world] = GetParam();
  const auto net = make_net();
  const auto want = test::zero_reference(c, net);
  auto store = Store::hash();
  auto errors = test::run_threads(world, [&](int rank) {
    auto pg = new_process_group(backend, Store::prefix("zero", store), rank, world);
    test::expect_zero_matches(pg, c, net, want);
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    OptimizersBackendsWorlds, ZeroParity,
    ::testing::Combine(::testing::ValuesIn(test::zero_optimizers()),
                       ::testing::ValuesIn(test::backends()), ::testing::Values(2, 3)),
    [](const auto& info) {
      return std::get<0>(info.param).name + "_" + std::get<1>(info.param) + "_" +
             std::to_string(std::get<2>(info.param));
    });

// Consolidated on rank 0 of 2 ranks after 2 steps, saved, loaded by 3 ranks which take 2 more:
// the parameters of 4 unsharded steps (support/zero_parity.h; under mpirun too).
TEST(Zero, StateSavedAtOneWorldSizeLoadsAtAnother) {
  const auto net = make_net();
  const auto want = test::zero_resume_reference(net);
  test::ZeroSaved saved;
  auto store = Store::hash();
  auto errors = test::run_threads(2, [&](int rank) {
    auto pg = new_process_group("shm", Store::prefix("zero2", store), rank, 2);
    auto mine = test::zero_save_after_two_steps(pg, net);
    if (rank == 0) saved = mine;
  });
  for (int r = 0; r < 2; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;

  errors = test::run_threads(3, [&](int rank) {
    test::expect_zero_resumes(new_process_group("gloo", Store::prefix("zero3", store), rank, 3),
                              saved, want);
  });
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(Zero, ANonZeroArchiveIsRefused) {
  auto pg = new_process_group("gloo", Store::hash(), 0, 1);
  auto params = copy_params(make_net());
  torch::optim::SGD plain(params, 0.1);
  std::ostringstream out;
  torch::save(plain, out);
  ZeroRedundancyOptimizer zero(params, pg,
                               optimizer_factory<torch::optim::SGD>(torch::optim::SGDOptions(0.1)));
  std::istringstream in(out.str());
  EXPECT_THAT(test::expect_throws<c10::Error>([&] { torch::load(zero, in); }),
              ::testing::HasSubstr("was not saved by a ZeroRedundancyOptimizer"));
}

// Largest first, to the emptiest rank (the first on ties), counted across groups.
TEST(ZeroPartition, GreedyLargestFirstAcrossGroups) {
  const auto p = detail::zero_partition({{3, 10, 5, 10}, {4, 4}}, 2);
  using V = std::vector<size_t>;
  // Group 0 in size order: 10 (k=1) -> 0, 10 (k=3) -> 1, 5 -> 0, 3 -> 1: sizes 15 and 13.
  EXPECT_EQ(p[0][0], (V{1, 2}));
  EXPECT_EQ(p[0][1], (V{3, 0}));
  // Group 1 goes on from those sizes: 4 -> 1 (17), 4 -> 0 (19).
  EXPECT_EQ(p[1][0], (V{1}));
  EXPECT_EQ(p[1][1], (V{0}));
}

}  // namespace
}  // namespace dpx::zero_redundancy_optimizer_test
