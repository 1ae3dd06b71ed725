// fully_shard's checkpoints on the mpi backend, one process per rank under mpirun: the full state
// dict read back by an unsharded module, a sharded one and PyTorch, and the resume without the
// optimizer's state, which must differ from the uninterrupted run (else the resumes of
// mpi_resume_test.cpp would prove nothing). The checks are those forked processes make on shm and
// gloo (tests/multiproc/fsdp_checkpoint_test.cpp; support/full_state_checks.h, sharded_resume.h).
// A save cut short by a killed rank is not here: mpirun ends the job when a rank dies
// (docs/backends.md).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <optional>

#include "mpi/from_rank0.h"
#include "mpi/mpi_group.h"
#include "support/full_state_checks.h"
#include "support/sharded_resume.h"

namespace dpx::mpi_test {
namespace {

// Resumed from step 4 with a fresh Adam, the 8 steps end away from the uninterrupted run's.
TEST(MpiFsdpCheckpoint, ResumingWithoutTheOptimizerStateDiffers) {
  auto pg = mpi_group();
  std::optional<test::TempDir> own;
  const auto dir = shared_temp_dir(pg, own);
  ASSERT_FALSE(dir.empty());
  test::sharded_checkpoint_run(pg, dir + "/ckpt", /*resume=*/false, 4, 8, dir + "/straight.bin");
  test::sharded_resume_without_optimizer_state(pg, dir + "/ckpt", 8, dir + "/fresh.bin");
  if (pg->rank() == 0) {
    const auto straight = test::read_params(dir + "/straight.bin");
    const auto fresh = test::read_params(dir + "/fresh.bin");
    EXPECT_EQ(fresh.numel(), straight.numel());  // not ASSERT: rank 0 must reach the barrier
    if (fresh.numel() == straight.numel()) {
      EXPECT_GT((fresh - straight).abs().max().item<double>(), 1e-6);
    }
  }
  pg->barrier()->wait();
}

// Saved whole by the sharded ranks, the file is read back by an unsharded module on rank 0, by a
// freshly sharded one on every rank, and by PyTorch's torch.load on rank 0 (in CTest
// mpi.np2.checkpoint_python, with the other cases that run Python).
TEST(MpiCheckpointPython, FullStateDictIsReadByPythonAndByAnUnshardedModule) {
  // The others wait in the last barrier while rank 0 runs Python.
  auto pg = mpi_group(std::chrono::minutes(2));
  if (test::kShardedBatch % pg->size() != 0) {
    GTEST_SKIP() << "SKIPPED: the batch of " << test::kShardedBatch << " rows does not split over "
                 << pg->size() << " ranks";
  }
  std::optional<test::TempDir> own;
  const auto dir = shared_temp_dir(pg, own);
  ASSERT_FALSE(dir.empty());
  test::save_and_reload_full_state_dict(pg, dir + "/model.pt");
  if (pg->rank() == 0) test::expect_python_reads_full_state_dict(dir + "/model.pt", dir);
  pg->barrier()->wait();
}

}  // namespace
}  // namespace dpx::mpi_test
