// fully_shard on the mpi backend against PyTorch's own fully_shard (support/fsdp_python.h), one
// process per rank under mpirun: rank 0 runs PyTorch's ranks and tells the others where their
// results are. Each case runs where mpirun started its world size (CTest mpi.np2.fsdp_python,
// mpi.np3.fsdp_python) and is skipped at the others.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <optional>

#include "mpi/mpi_group.h"
#include "support/fsdp_python.h"
#include "support/temp_dir.h"

namespace dpx::mpi_test {
namespace {

using Case = test::FsdpPythonCase;

void expect_matches_pytorch(const Case& c) {
  // The others wait in the broadcast below while rank 0 runs PyTorch (up to its 240 s).
  auto pg = mpi_group(std::chrono::minutes(5));
  if (pg->size() != c.world) GTEST_SKIP() << "runs under mpirun -np " << c.world;
  std::string python;
  // Every rank decides alike: one machine, one environment.
  if (const auto why = test::fsdp_python_skip(c, &python); !why.empty()) {
    GTEST_SKIP() << "SKIPPED: " << why;
  }
  const auto data = test::fsdp_python_data(c);
  std::optional<test::TempDir> dir;
  std::optional<test::PyTorchFsdpResult> ran;
  // The results' folder, "" when PyTorch failed: 4096 bytes, as int32 (broadcast's dtypes).
  auto where = at::zeros({1024}, at::kInt);
  if (pg->rank() == 0) {
    dir.emplace();
    ran = test::run_pytorch_fully_shard(python, c, dir->path(), data);
    if (!ran->model.empty()) {
      std::strncpy(static_cast<char*>(where.data_ptr()), dir->path().c_str(), 4095);
    }
  }
  pg->broadcast(where, {0})->wait();
  const std::string path(static_cast<const char*>(where.data_ptr()));
  ASSERT_FALSE(path.empty()) << "PyTorch's fully_shard run failed (rank 0's log says why)";
  const auto want = ran ? *ran : test::load_pytorch_fully_shard(path);
  test::train_and_compare_with_pytorch(c, pg, data, want);
  pg->barrier()->wait();  // rank 0's folder outlives the others' reads
}

TEST(MpiFsdpPython, SgdMatchesPyTorchsFullyShardOnThreeRanks) {
  expect_matches_pytorch({3, "sgd", false});
}

TEST(MpiFsdpPython, AdamWWithATiedParameterMatchesPyTorchsFullyShard) {
  expect_matches_pytorch({2, "adamw", true});
}

TEST(MpiFsdpPython, Float32MatchesPyTorchsFullyShardWithinRounding) {
  expect_matches_pytorch({3, "sgd", false, torch::kFloat, {}, 1e-5});
}

// bfloat16 compute on float32 shards; the tolerances are fsdp_python_test.cpp's.
TEST(MpiFsdpPython, MixedPrecisionPolicyMatchesPyTorchs) {
  MixedPrecisionPolicy policy;
  policy.param_dtype = at::kBFloat16;
  policy.reduce_dtype = at::kFloat;
  policy.output_dtype = at::kFloat;
  expect_matches_pytorch({2, "adamw", false, torch::kFloat, policy, 1e-2});
}

// Reduce-scatters in bfloat16: dpx's own MPI_Op for the sum.
TEST(MpiFsdpPython, BFloat16ReductionMatchesPyTorchs) {
  MixedPrecisionPolicy policy;
  policy.param_dtype = at::kBFloat16;
  policy.reduce_dtype = at::kBFloat16;
  expect_matches_pytorch({2, "sgd", false, torch::kFloat, policy, 1e-2});
}

TEST(MpiFsdpPython, ASequentialShardedAsInPythonMatchesPyTorchOnTwoRanks) {
  expect_matches_pytorch({2, "adamw", false, torch::kDouble, {}, 1e-12, "seq"});
}

TEST(MpiFsdpPython, AModuleListOfUnitsMatchesPyTorchOnThreeRanks) {
  expect_matches_pytorch({3, "adamw", false, torch::kDouble, {}, 1e-12, "list"});
}

}  // namespace
}  // namespace dpx::mpi_test
