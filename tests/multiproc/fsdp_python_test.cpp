// fully_shard against PyTorch's own fully_shard (support/fsdp_python.h), dpx's ranks as threads
// over each of its host backends.
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/fsdp_python.h"
#include "support/harness.h"
#include "support/temp_dir.h"

namespace dpx::fsdp_python_test {
namespace {

using Case = test::FsdpPythonCase;

void expect_matches_pytorch(const Case& c) {
  std::string python;
  if (const auto why = test::fsdp_python_skip(c, &python); !why.empty()) {
    GTEST_SKIP() << "SKIPPED: " << why;
  }
  const auto data = test::fsdp_python_data(c);
  test::TempDir dir;
  const auto want = test::run_pytorch_fully_shard(python, c, dir.path(), data);
  ASSERT_FALSE(want.model.empty());
  for (const auto& backend : test::host_backends()) {
    SCOPED_TRACE(backend + ", world " + std::to_string(c.world));
    auto store = Store::hash();
    auto errors = test::run_threads(c.world, [&](int rank) {
      SCOPED_TRACE(backend + ", rank " + std::to_string(rank));  // failures come from the threads
      test::train_and_compare_with_pytorch(c, new_process_group(backend, store, rank, c.world),
                                           data, want);
    });
    for (int r = 0; r < c.world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  }
}

// The cases: test::fsdp_python_case() (support/fsdp_python.cpp).
TEST(FsdpPython, SgdMatchesPyTorchsFullyShardOnThreeRanks) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(FsdpPython, AdamWWithATiedParameterMatchesPyTorchsFullyShard) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(FsdpPython, Float32MatchesPyTorchsFullyShardWithinRounding) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(FsdpPython, MixedPrecisionPolicyMatchesPyTorchs) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(FsdpPython, BFloat16ReductionMatchesPyTorchs) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(FsdpPython, ASequentialShardedAsInPythonMatchesPyTorchOnTwoRanks) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(FsdpPython, ASequentialShardedAsInPythonMatchesPyTorchOnThreeRanks) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(FsdpPython, AModuleListOfUnitsMatchesPyTorchOnThreeRanks) {
  expect_matches_pytorch(test::fsdp_python_case());
}

}  // namespace
}  // namespace dpx::fsdp_python_test
