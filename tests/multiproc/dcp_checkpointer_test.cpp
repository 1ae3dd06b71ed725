// The DcpCheckpointer: a fully_shard and a DDP-style (whole on every rank) model with Adam,
// saved on 2 ranks, resumed on 3 and on 1 with the same model, optimizer and progress; a save cut
// short by a killed rank leaves the previous checkpoint the newest; keep_last prunes; saves in
// the background keep the state of the step they were asked at and report their failures; and
// PyTorch 2.15's dcp.load reads a step folder into a plain model (tests/python/dcp_oracle.py).
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>

#include <functional>

#include "dpx/checkpoint/dcp_checkpointer.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/comm/init.h"
#include "dpx/errors.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "dpx/runtime/files.h"
#include "support/checkpoint_files.h"
#include "support/dcp_checkpointer_checks.h"
#include "support/dcp_interop.h"
#include "support/dcp_resume.h"
#include "support/harness.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"

namespace dpx::dcp_checkpointer_test {
namespace {

using Replica = test::DcpReplica;

torch::optim::Adam make_adam(const Replica& r) { return test::dcp_adam(r); }

void expect_same_state(const c10::impl::GenericDict& got, const c10::impl::GenericDict& want,
                       const std::string& what) {
  test::expect_same_dict(got, want, what);
}

// 2 ranks train 3 steps and save kDcpProgress to `dir`; rank 0 keeps the model and the optimizer's
// state whole in <dir>/dcp-3-model.pt and -optim.pt (support/dcp_resume.h).
void save_on_two(bool sharded, const std::string& dir) {
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(2, [&](int rank) {
    torch::set_num_threads(1);
    test::dcp_train_and_save(new_process_group("shm", server.client(), rank, 2), sharded, dir);
  }));
}

// Saved on 2 ranks, resumed on 3 and on 1 (support/dcp_resume.h; under mpirun too).
TEST(DcpCheckpointer, SavedOnTwoRanksResumesOnThreeAndOne) {
  for (const bool sharded : {true, false}) {
    SCOPED_TRACE(sharded ? "fully_shard" : "whole on every rank (DDP)");
    test::TempDir dir;
    save_on_two(sharded, dir.path());
    for (const int world : {3, 1}) {
      SCOPED_TRACE("resumed on " + std::to_string(world));
      test::StoreServer server;
      test::expect_all_ok(test::run_processes(world, [&](int rank) {
        torch::set_num_threads(1);
        test::expect_dcp_resumes(new_process_group("shm", server.client(), rank, world), sharded,
                                 dir.path());
      }));
    }
  }
}

// Rank 1 is SIGKILLed after writing part of its file of the step-4 save (synchronous, and in
// the background): rank 0 gets an error instead of a hang, step 2 stays the newest checkpoint and
// resumes, and the next save removes what the killed one left.
TEST(DcpCheckpointer, ASaveCutShortLeavesThePreviousCheckpointTheNewest) {
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "async_save" : "synchronous");
    test::TempDir dir;
    {
      test::StoreServer server;
      const auto results = test::run_processes(2, [&](int rank) {
        auto pg = new_process_group("shm", server.client(), rank, 2,
                                    test::with_timeout(std::chrono::seconds(5)));
        Replica r(/*sharded=*/true, pg);
        auto adam = make_adam(r);
        r.train(adam, 2);
        DcpCheckpointerOptions options{.directory = dir.path(),
                                       .timeout = std::chrono::seconds(5),
                                       .async_save = async};
        {
          DcpCheckpointer ckpt(options, pg);
          ckpt.save(*r.net, adam, {.step = 2});
          ckpt.wait();
        }
        const auto model = r.whole_state(true);
        if (rank == 0) torch_save(model, dir / "at_step_2.pt");
        r.train(adam, 2);
        if (rank == 1) options.write.after_partial_write = [] { test::kill_this_rank(); };
        EXPECT_ANY_THROW({
          DcpCheckpointer ckpt(options, pg);
          ckpt.save(*r.net, adam, {.step = 4});
          ckpt.wait();
        });
      }, {std::chrono::seconds(60)});
      ASSERT_EQ(results.size(), 2u);
      EXPECT_EQ(results[1].signal, SIGKILL) << results[1].output;
      EXPECT_TRUE(results[0].ok()) << results[0].output;
    }
    EXPECT_TRUE(path_exists(dir / "dcp-4.partial"));
    test::StoreServer server;
    test::expect_all_ok(test::run_processes(2, [&](int rank) {
      torch::set_num_threads(1);
      auto pg = new_process_group("shm", server.client(), rank, 2);
      DcpCheckpointer ckpt({.directory = dir.path(), .async_save = async}, pg);
      EXPECT_EQ(ckpt.list(), std::vector<std::string>{ckpt.path_for_step(2)});
      Replica r(/*sharded=*/true, pg);
      auto adam = make_adam(r);
      const auto progress = ckpt.load_latest(*r.net, adam);
      ASSERT_TRUE(progress.has_value());
      EXPECT_EQ(progress->step, 2);
      expect_same_state(r.whole_state(true), torch_load(dir / "at_step_2.pt").toGenericDict(),
                        "model");
      ckpt.save(*r.net, adam, {.step = 6});
      ckpt.wait();
    }));
    EXPECT_FALSE(path_exists(dir / "dcp-4.partial"));
    EXPECT_TRUE(path_exists(dir / "dcp-6/.metadata"));
  }
}

// async_save: save() returns before the checkpoint is written and training goes on changing the
// parameters and Adam's state in place; the checkpoint holds the state of the step it was asked
// at (the copy), resumes on 3 ranks as a synchronous one does, and its folder holds only what
// dcp.save writes.
TEST(DcpCheckpointer, AnAsyncSaveKeepsTheStateOfItsStepWhileTrainingGoesOn) {
  for (const bool sharded : {true, false}) {
    SCOPED_TRACE(sharded ? "fully_shard" : "whole on every rank (DDP)");
    test::TempDir dir;
    test::StoreServer server;
    test::expect_all_ok(test::run_processes(2, [&](int rank) {
      torch::set_num_threads(1);
      test::async_save_while_training(new_process_group("shm", server.client(), rank, 2),
                                      sharded, dir.path());
    }));
    std::vector<std::string> files = list_dir(dir / "dcp-3");
    EXPECT_EQ(files, test::dcp_step_files(2));
    test::StoreServer server3;
    test::expect_all_ok(test::run_processes(3, [&](int rank) {
      torch::set_num_threads(1);
      test::expect_async_saved_state_resumes(new_process_group("shm", server3.client(), rank, 3),
                                             sharded, dir.path());
    }));
  }
}

// A background save whose write fails on one rank (here its part's write throws) is no
// checkpoint: wait() throws a CheckpointError on both ranks naming the rank, the previous
// checkpoint stays the newest, and the next save succeeds.
TEST(DcpCheckpointer, AFailedAsyncSaveIsReportedOnEveryRankByTheNextWait) {
  test::TempDir dir;
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(2, [&](int rank) {
    torch::set_num_threads(1);
    test::expect_failed_async_save_reported(new_process_group("shm", server.client(), rank, 2),
                                            dir.path());
  }));
}

// keep_last 2 of steps 1, 2, 3: 3 and 2 stay. A step folder without .metadata (a save in
// progress, or cut short) is no checkpoint: not listed, not loaded.
TEST(DcpCheckpointer, KeepsTheNewestAndOnlyCompleteCheckpoints) {
  test::TempDir dir;
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(2, [&](int rank) {
    torch::set_num_threads(1);
    test::expect_keep_last_and_only_complete(new_process_group("shm", server.client(), rank, 2),
                                             dir.path());
  }));
}

// PyTorch 2.15, one process: dcp.load of {"model", "optim"} (the progress beside them unread)
// into a plain optim_model() and Adam, and of {"model", "progress"}.
TEST(DcpCheckpointer, PyTorchLoadsAStepFolderIntoAPlainModel) {
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed.checkpoint");
  test::TempDir dir;
  save_on_two(/*sharded=*/true, dir / "ckpt");
  // no checkpoint of dcp_oracle.py's model()
  test::write_dcp_check_lists(dir.path(), {}, {"ckpt/dcp-3"});
  EXPECT_TRUE(test::pytorch_checks_dcp(dir.path(), 1)) << "PyTorch's dcp.load (its output is above)";
}

}  // namespace
}  // namespace dpx::dcp_checkpointer_test
