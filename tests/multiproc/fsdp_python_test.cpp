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

// Uneven shards on 3 ranks (13, 3 and 8 rows), a frozen bias, the root's own parameters and a
// buffer; SGD with momentum.
TEST(FsdpPython, SgdMatchesPyTorchsFullyShardOnThreeRanks) {
  expect_matches_pytorch({3, "sgd", false});
}

// A parameter under two names in the root unit, stepped once per step; AdamW's state.
TEST(FsdpPython, AdamWWithATiedParameterMatchesPyTorchsFullyShard) {
  expect_matches_pytorch({2, "adamw", true});
}

// float32: the gradients' average differs from PyTorch's in the last bits on 3 ranks (dpx
// averages float32 in the collective; FSDP2 on gloo divides before and after the sum).
TEST(FsdpPython, Float32MatchesPyTorchsFullyShardWithinRounding) {
  expect_matches_pytorch({3, "sgd", false, torch::kFloat, {}, 1e-5});
}

// Under bfloat16 compute the LibTorch and the Python runs drift apart by up to ~1.5e-3 in 20
// steps, though each matches its own unsharded bfloat16 model step for step at 1 rank exactly
// (checked by hand; the source of the drift between the two was not traced): the tolerance is
// 1e-2, about bfloat16's epsilon (7.8e-3).

// MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32, output_dtype=float32 on the
// root): bfloat16 compute on float32 shards, inputs cast at each unit, the output cast back.
TEST(FsdpPython, MixedPrecisionPolicyMatchesPyTorchs) {
  MixedPrecisionPolicy policy;
  policy.param_dtype = at::kBFloat16;
  policy.reduce_dtype = at::kFloat;
  policy.output_dtype = at::kFloat;
  expect_matches_pytorch({2, "adamw", false, torch::kFloat, policy, 1e-2});
}

// reduce_dtype=bfloat16: gradients reduce-scattered in bfloat16, then stepped in float32.
TEST(FsdpPython, BFloat16ReductionMatchesPyTorchs) {
  MixedPrecisionPolicy policy;
  policy.param_dtype = at::kBFloat16;
  policy.reduce_dtype = at::kBFloat16;
  expect_matches_pytorch({2, "sgd", false, torch::kFloat, policy, 1e-2});
}

// A Python FSDP2 script's Sequential, sharded with the same calls (fully_shard(m[0]),
// fully_shard(m[2]), fully_shard(m)) and called through the root's handle: float64, AdamW, uneven
// shards (13 and 7 rows on 2 and 3 ranks), a frozen LayerNorm weight.
TEST(FsdpPython, ASequentialShardedAsInPythonMatchesPyTorchOnTwoRanks) {
  expect_matches_pytorch({2, "adamw", false, torch::kDouble, {}, 1e-12, "seq"});
}

TEST(FsdpPython, ASequentialShardedAsInPythonMatchesPyTorchOnThreeRanks) {
  expect_matches_pytorch({3, "adamw", false, torch::kDouble, {}, 1e-12, "seq"});
}

// A ModuleList iterated by the model's forward, each item called through its handle.
TEST(FsdpPython, AModuleListOfUnitsMatchesPyTorchOnThreeRanks) {
  expect_matches_pytorch({3, "adamw", false, torch::kDouble, {}, 1e-12, "list"});
}

}  // namespace
}  // namespace dpx::fsdp_python_test
