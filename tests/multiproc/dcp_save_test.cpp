// DCP checkpoints written by dpx: fully_shard modules (each rank its rows, uneven and empty
// shards, a bfloat16 unit) and replicated ones (each tensor written once), and a fully_shard
// model with its Adam's state, on 2 and 3 ranks, read by PyTorch 2.15's dcp.load into FSDP2
// models on 1, 2, 3 and 4 ranks (tests/python/dcp_oracle.py check: one Python launch per world
// size for every checkpoint) and by dpx itself (the Adam state too, on one process); PyTorch's
// FSDP2 checkpoint resharded into dpx's fully_shard; PyTorch's FSDP2 + Adam checkpoint resumed
// by dpx's fully_shard on other world sizes; and a save cut short by a killed rank, which leaves
// no .metadata.
#include <gtest/gtest.h>
#include <torch/torch.h>


#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "dpx/checkpoint/dcp.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/comm/init.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "dpx/runtime/files.h"
#include "support/checkpoint_files.h"
#include "support/dcp_interop.h"
#include "support/harness.h"
#include "support/python_oracle.h"
#include "support/temp_dir.h"

namespace dpx::dcp_save_test {
namespace {

using test::dcp_oracle_model;

// `world` ranks save what support/dcp_interop.h's dcp_save_for_pytorch saves to `dir`.
void save_on(int world, const std::string& dir) {
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(world, [&](int rank) {
    torch::set_num_threads(1);
    test::dcp_save_for_pytorch(new_process_group("shm", server.client(), rank, world), dir);
  }));
}

TEST(DcpSave, PyTorchLoadsWhatDpxWroteOnAnyWorldSize) {
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed.checkpoint");
  test::TempDir dir;
  for (const int world : {2, 3}) save_on(world, dir.path());
  const auto names = test::write_dcp_check_lists(dir.path(), {2, 3});
  for (const int world : {1, 2, 3, 4}) {
    EXPECT_TRUE(test::pytorch_checks_dcp(dir.path(), world))
        << "PyTorch's dcp.load on " << world << " rank(s) (its output is above)";
  }
  // dpx reads its own checkpoints whole, too, and the optimizers' states
  test::expect_dpx_reads_dcp_models_whole(dir.path(), names);
  test::expect_dpx_reads_dcp_optimizers_whole(dir.path(), test::dcp_optimizer_checkpoints({2, 3}));
}

// A ZeroRedundancyOptimizer's DCP checkpoint of 3 ranks resumes in ZeroRedundancyOptimizers of
// 2 (each rank the state of its new share, and the checkpoint's hyper-parameters, not the ones
// it was made with): their next step is a plain Adam's fourth, to the bit.
TEST(DcpSave, ZeroResumesOnAnotherWorldSizeAsAPlainAdamContinues) {
  test::TempDir dir;
  save_on(3, dir.path());
  auto plain = test::dcp_optim_model();
  torch::optim::Adam plain_adam(plain->parameters(), test::dcp_oracle_adam());
  test::dcp_adam_steps(plain, plain_adam, 4);
  torch::save(plain->parameters(), dir / "after_4.pt");
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(2, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("shm", server.client(), rank, 2);
    auto z = test::dcp_optim_model();
    ZeroRedundancyOptimizer zero(
        z->parameters(), pg, optimizer_factory<torch::optim::Adam>(torch::optim::AdamOptions()));
    dcp_load_state_dict(*z, dir / "zero-3", {.prefix = "model."});
    dcp_load_optimizer_state_dict(*z, zero, dir / "zero-3");
    test::dcp_adam_steps(z, zero, 1);
    std::vector<torch::Tensor> want;
    torch::load(want, dir / "after_4.pt");
    const auto got = z->parameters();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(torch::equal(got[i], want[i])) << "parameter " << i << " on rank " << rank;
    }
  }));
}

// body(rank, pg) on 2 and then 4 ranks over shm, each rank a process of its own.
template <typename Body>
void on_two_and_four_ranks(Body body) {
  for (const int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    test::StoreServer server;
    test::expect_all_ok(test::run_processes(world, [&](int rank) {
      torch::set_num_threads(1);
      body(rank, new_process_group("shm", server.client(), rank, world));
    }));
  }
}

// PyTorch's FSDP2 checkpoint of 3 ranks (dcp_oracle.py write), resharded into dpx's fully_shard
// on 2 and 4 ranks: every rank reads only its rows; gathered whole, they are PyTorch's values.
TEST(DcpSave, DpxReshardsAPyTorchCheckpointOnOtherWorldSizes) {
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed.checkpoint");
  const std::string oracle = test::pytorch_dcp_checkpoints();
  ASSERT_FALSE(oracle.empty()) << "tests/python/dcp_oracle.py write failed (output above)";
  on_two_and_four_ranks([&](int, std::shared_ptr<ProcessGroup> pg) {
    test::expect_reshards_pytorch_dcp(pg, oracle);
  });
}

// PyTorch's FSDP2 + Adam of 3 ranks, 3 steps in (dcp_oracle.py write, adam/), resumed by dpx's
// fully_shard on 2 and 4 ranks (uneven and empty shards of the state too): each rank reads the
// rows of its shards of exp_avg and exp_avg_sq, and the hyper-parameters (the optimizer is made
// with Adam's defaults); one more step on the same batch lands on PyTorch's parameters after it.
TEST(DcpSave, DpxResumesPyTorchsFsdp2AdamOnOtherWorldSizes) {
  DPX_SKIP_UNLESS_PYTHON_HAS(DPX_PYTHON, "torch.distributed.checkpoint");
  const std::string oracle = test::pytorch_dcp_checkpoints();
  ASSERT_FALSE(oracle.empty()) << "tests/python/dcp_oracle.py write failed (output above)";
  on_two_and_four_ranks([&](int, std::shared_ptr<ProcessGroup> pg) {
    test::expect_resumes_pytorch_fsdp2_adam(pg, oracle);
  });
}

TEST(DcpSave, ARankKilledMidWriteLeavesNoCheckpoint) {
  test::TempDir dir;
  const std::string ckpt = dir / "step-2";
  test::StoreServer server;
  const auto results = test::run_processes(2, [&](int rank) {
    torch::set_num_threads(1);
    auto pg = new_process_group("shm", server.client(), rank, 2,
                                test::with_timeout(std::chrono::seconds(5)));
    auto m = dcp_oracle_model();
    DcpSaveOptions options{.prefix = "model.", .timeout = std::chrono::seconds(5)};
    if (rank == 1) options.write.after_partial_write = [] { test::kill_this_rank(); };
    dcp_save_state_dict(*m, ckpt, pg, options);
  });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_NE(results[0].exit_code, 0) << "rank 0 returned from a save its peer never finished";
  EXPECT_FALSE(path_exists(ckpt + "/.metadata"));
  auto m = dcp_oracle_model();
  try {
    dcp_load_state_dict(*m, ckpt);
    ADD_FAILURE() << "a checkpoint cut short loaded";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no .metadata file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpx::dcp_save_test
