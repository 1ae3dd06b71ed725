// State saved at one world size and resumed at another on the mpi backend. Under mpirun the world
// size is fixed for a run, so each side is a run of its own: tests/scripts/mpi/resume.sh runs the
// Save tests at 2 ranks and the Load tests at 3 with DPX_TEST_RESUME_DIR naming a fresh folder
// (CTest mpi.resume). The checks are those threads and forked processes make on shm and gloo
// (support/zero_parity.h, dcp_resume.h, sharded_resume.h); disabled, so mpi.np2-np4 do not run
// them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>

#include "mpi/mpi_group.h"
#include "support/dcp_resume.h"
#include "support/sharded_resume.h"
#include "support/temp_dir.h"
#include "support/zero_parity.h"

namespace dpx::mpi_test {
namespace {

std::string resume_dir() {
  const char* dir = std::getenv("DPX_TEST_RESUME_DIR");
  return dir ? dir : "";
}

constexpr const char* kNoDir =
    "SKIPPED: DPX_TEST_RESUME_DIR is not set (tests/scripts/mpi/resume.sh sets it)";

const char* dcp_folder(bool sharded) { return sharded ? "/dcp-sharded" : "/dcp-whole"; }

// ZeroRedundancyOptimizer over Adam, 2 steps, consolidated on rank 0, which writes its archive
// and parameters.
TEST(MpiResume, DISABLED_SaveZero) {
  if (resume_dir().empty()) GTEST_SKIP() << kNoDir;
  auto pg = mpi_group();
  const auto saved = test::zero_save_after_two_steps(pg, test::zero_net());
  if (pg->rank() != 0) return;
  test::spit(resume_dir() + "/zero-optim.pt", saved.optimizer);
  torch::save(saved.params, resume_dir() + "/zero-params.pt");
}

// A DcpCheckpointer's checkpoint of a fully_shard model and of a whole one, with Adam.
TEST(MpiResume, DISABLED_SaveDcp) {
  if (resume_dir().empty()) GTEST_SKIP() << kNoDir;
  auto pg = mpi_group();
  for (const bool sharded : {true, false}) {
    test::dcp_train_and_save(pg, sharded, resume_dir() + dcp_folder(sharded));
  }
}

// fully_shard's ShardedCheckpointer after 4 of 8 steps of Adam; rank 0 writes the parameters of
// all 8 steps, uninterrupted.
TEST(MpiResume, DISABLED_SaveSharded) {
  if (resume_dir().empty()) GTEST_SKIP() << kNoDir;
  test::sharded_checkpoint_run(mpi_group(), resume_dir() + "/sharded", /*resume=*/false, 4, 8,
                               resume_dir() + "/straight.bin");
}

// The ZeRO state loaded by this world's ranks takes 2 more steps: 4 unsharded steps' parameters.
TEST(MpiResume, DISABLED_LoadZero) {
  if (resume_dir().empty()) GTEST_SKIP() << kNoDir;
  auto pg = mpi_group();
  test::ZeroSaved saved;
  saved.optimizer = test::read_file(resume_dir() + "/zero-optim.pt");
  ASSERT_FALSE(saved.optimizer.empty()) << "the Save run wrote no zero-optim.pt";
  torch::load(saved.params, resume_dir() + "/zero-params.pt");
  test::expect_zero_resumes(pg, saved, test::zero_resume_reference(test::zero_net()));
}

// load_latest on this world's ranks restores the progress, the model and Adam's state.
TEST(MpiResume, DISABLED_LoadDcp) {
  if (resume_dir().empty()) GTEST_SKIP() << kNoDir;
  auto pg = mpi_group();
  for (const bool sharded : {true, false}) {
    SCOPED_TRACE(sharded ? "fully_shard" : "whole on every rank (DDP)");
    test::expect_dcp_resumes(pg, sharded, resume_dir() + dcp_folder(sharded));
  }
}

// Resumed from step 4 by this world's ranks, the 8 steps end where the uninterrupted run did.
TEST(MpiResume, DISABLED_LoadSharded) {
  if (resume_dir().empty()) GTEST_SKIP() << kNoDir;
  auto pg = mpi_group();
  test::sharded_checkpoint_run(pg, resume_dir() + "/sharded", /*resume=*/true, 4, 8,
                               resume_dir() + "/resumed.bin");
  pg->barrier()->wait();  // rank 0 has written resumed.bin
  const auto straight = test::read_params(resume_dir() + "/straight.bin");
  const auto resumed = test::read_params(resume_dir() + "/resumed.bin");
  ASSERT_EQ(resumed.numel(), straight.numel());
  EXPECT_LE((resumed - straight).abs().max().item<double>(), 1e-12);
}

}  // namespace
}  // namespace dpx::mpi_test
