// The DcpCheckpointer's background saves and pruning on the mpi backend, one process per rank
// under mpirun, at whatever world size mpirun started: the checks forked processes make on shm
// (tests/multiproc/dcp_checkpointer_test.cpp; support/dcp_checkpointer_checks.h). Saved and
// resumed at the same world size here (mpirun fixes it for a run; mpi_resume_test.cpp crosses
// sizes). A save cut short by a killed rank is not here: mpirun ends the job when a rank dies
// (docs/backends.md).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>

#include "dpx/runtime/files.h"
#include "mpi/from_rank0.h"
#include "mpi/mpi_group.h"
#include "support/dcp_checkpointer_checks.h"

namespace dpx::mpi_test {
namespace {

// async_save: the checkpoint holds the state of the step it was asked at while training went on
// changing it, its folder holds only what dcp.save writes, and it resumes.
TEST(MpiDcpCheckpointer, AnAsyncSaveKeepsTheStateOfItsStepWhileTrainingGoesOn) {
  auto pg = mpi_group();
  for (const bool sharded : {true, false}) {
    SCOPED_TRACE(sharded ? "fully_shard" : "whole on every rank (DDP)");
    std::optional<test::TempDir> own;
    const auto dir = shared_temp_dir(pg, own);
    ASSERT_FALSE(dir.empty());
    test::async_save_while_training(pg, sharded, dir);
    if (pg->rank() == 0) EXPECT_EQ(list_dir(dir + "/dcp-3"), test::dcp_step_files(pg->size()));
    test::expect_async_saved_state_resumes(pg, sharded, dir);
    pg->barrier()->wait();
  }
}

TEST(MpiDcpCheckpointer, AFailedAsyncSaveIsReportedOnEveryRankByTheNextWait) {
  auto pg = mpi_group();
  std::optional<test::TempDir> own;
  const auto dir = shared_temp_dir(pg, own);
  ASSERT_FALSE(dir.empty());
  test::expect_failed_async_save_reported(pg, dir);
  pg->barrier()->wait();
}

TEST(MpiDcpCheckpointer, KeepsTheNewestAndOnlyCompleteCheckpoints) {
  auto pg = mpi_group();
  std::optional<test::TempDir> own;
  const auto dir = shared_temp_dir(pg, own);
  ASSERT_FALSE(dir.empty());
  test::expect_keep_last_and_only_complete(pg, dir);
  pg->barrier()->wait();
}

}  // namespace
}  // namespace dpx::mpi_test
