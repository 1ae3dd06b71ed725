// fully_shard on the mpi backend against PyTorch's own fully_shard (support/fsdp_python.h), one
// process per rank under mpirun: rank 0 runs PyTorch's ranks and tells the others where their
// results are. Each case runs where mpirun started its world size (CTest mpi.np2.fsdp_python,
// mpi.np3.fsdp_python) and is skipped at the others.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <exception>
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
    // Whatever fails here, rank 0 still joins the broadcast (with ""), so the others fail at
    // once instead of waiting out the group's timeout.
    try {
      dir.emplace();
      ran = test::run_pytorch_fully_shard(python, c, dir->path(), data);
      if (!ran->model.empty()) {
        std::strncpy(static_cast<char*>(where.data_ptr()), dir->path().c_str(), 4095);
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "preparing or reading PyTorch's run failed: " << e.what();
    }
  }
  pg->broadcast(where, {0})->wait();
  const std::string path(static_cast<const char*>(where.data_ptr()));
  ASSERT_FALSE(path.empty()) << "PyTorch's fully_shard run failed (rank 0's log says why)";
  const auto want = ran ? *ran : test::load_pytorch_fully_shard(path);
  test::train_and_compare_with_pytorch(c, pg, data, want);
  pg->barrier()->wait();  // rank 0's folder outlives the others' reads
}

// The cases: test::fsdp_python_case() (support/fsdp_python.cpp).
TEST(MpiFsdpPython, SgdMatchesPyTorchsFullyShardOnThreeRanks) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(MpiFsdpPython, AdamWWithATiedParameterMatchesPyTorchsFullyShard) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(MpiFsdpPython, Float32MatchesPyTorchsFullyShardWithinRounding) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(MpiFsdpPython, MixedPrecisionPolicyMatchesPyTorchs) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(MpiFsdpPython, BFloat16ReductionMatchesPyTorchs) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(MpiFsdpPython, ASequentialShardedAsInPythonMatchesPyTorchOnTwoRanks) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(MpiFsdpPython, ASequentialShardedAsInPythonMatchesPyTorchOnThreeRanks) {
  expect_matches_pytorch(test::fsdp_python_case());
}
TEST(MpiFsdpPython, AModuleListOfUnitsMatchesPyTorchOnThreeRanks) {
  expect_matches_pytorch(test::fsdp_python_case());
}

}  // namespace
}  // namespace dpx::mpi_test
