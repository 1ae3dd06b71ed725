// Checkpoints of sharded modules: the full state dict that Python and an unsharded LibTorch
// module read, sharded checkpoints that resume on the same and on other world sizes (optimizer
// state included), and a save cut short that leaves the previous checkpoint intact.
#include <signal.h>
#include <torch/torch.h>

#include <cstdio>

#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/dpx.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"
#include "support/fsdp_models.h"
#include "support/full_state_checks.h"
#include "support/harness.h"
#include "support/sharded_resume.h"

namespace dpx::fsdp_checkpoint_test {
namespace {

using test::read_params;
using test::write_params;

void train(FSDPModule<test::ShardNetImpl>& model, torch::optim::Optimizer& opt, int from, int to,
           int rank, int world) {
  test::train_sharded_steps(model, opt, from, to, rank, world);
}

std::string temp_dir() {
  char tmpl[] = "/tmp/dpx-fsdp-ckpt-XXXXXX";
  return ::mkdtemp(tmpl);
}

// `world` ranks over shm run support/sharded_resume.h's part (under mpirun too).
void run(int world, const std::string& dir, bool resume, int save_at, int steps,
         const std::string& out) {
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(world, [&](int rank) {
    torch::set_num_threads(1);
    test::sharded_checkpoint_run(new_process_group("shm", server.client(), rank, world), dir,
                                 resume, save_at, steps, out);
  }));
}

TEST(FsdpCheckpoint, ShardedCheckpointResumesOnTheSameAndOtherWorldSizes) {
  const auto dir = temp_dir();
  run(2, dir, /*resume=*/false, 4, 8, dir + "/straight.bin");
  const auto straight = read_params(dir + "/straight.bin");
  for (int world : {2, 3, 6}) {
    SCOPED_TRACE("resumed on " + std::to_string(world) + " ranks");
    run(world, dir, /*resume=*/true, 4, 8, dir + "/resumed.bin");
    const auto resumed = read_params(dir + "/resumed.bin");
    ASSERT_EQ(resumed.numel(), straight.numel());
    EXPECT_LE((resumed - straight).abs().max().item<double>(), 1e-12);
  }
  std::system(("rm -rf " + dir).c_str());
}

// A resumed run whose optimizer state were lost would not reproduce the uninterrupted one: the
// comparison above is only meaningful if it can fail, so check that it does without the state.
TEST(FsdpCheckpoint, ResumingWithoutTheOptimizerStateDiffers) {
  const auto dir = temp_dir();
  run(2, dir, /*resume=*/false, 4, 8, dir + "/straight.bin");
  const auto straight = read_params(dir + "/straight.bin");
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(2, [&](int rank) {
    test::sharded_resume_without_optimizer_state(new_process_group("shm", server.client(), rank, 2),
                                                 dir, 8, dir + "/fresh_optimizer.bin");
  }));
  EXPECT_GT((read_params(dir + "/fresh_optimizer.bin") - straight).abs().max().item<double>(), 1e-6);
  std::system(("rm -rf " + dir).c_str());
}

TEST(FsdpCheckpoint, FullStateDictIsReadByPythonAndByAnUnshardedModule) {
  const auto dir = temp_dir();
  const auto path = dir + "/model.pt";
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(3, [&](int rank) {
    test::save_and_reload_full_state_dict(new_process_group("gloo", server.client(), rank, 3),
                                          path);
  }));
  test::expect_python_reads_full_state_dict(path, dir);
  std::system(("rm -rf " + dir).c_str());
}

// Rank 1 is SIGKILLed in the middle of writing its part of the second checkpoint: rank 0 gets a
// typed error instead of a hang, the first checkpoint is still the newest complete one, and a
// new job resumes from it.
TEST(FsdpCheckpoint, SaveCutShortLeavesThePreviousCheckpointIntact) {
  const auto dir = temp_dir();
  {
    test::StoreServer server;
    auto results = test::run_processes(2, [&](int rank) {
      auto pg = new_process_group("gloo", server.client(), rank, 2,
                                  test::with_timeout(std::chrono::milliseconds(5000)));
      auto net = test::make_shard_net();
      auto model = test::shard(net, pg);
      torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
      train(model, opt, 0, 2, rank, 2);
      ShardedCheckpointerOptions options{.directory = dir};
      ShardedCheckpointer(options, pg).save(*net, opt, {.step = 2});
      auto saved = full_state_dict(*net);
      if (rank == 0) write_params(dir + "/at_step_2.bin", saved);
      train(model, opt, 2, 4, rank, 2);
      if (rank == 1) options.write.after_partial_write = [] { test::kill_this_rank(); };
      EXPECT_THROW(ShardedCheckpointer(options, pg).save(*net, opt, {.step = 4}), DistributedError);
    }, {std::chrono::seconds(60)});
    EXPECT_EQ(results[1].signal, SIGKILL) << results[1].output;
    EXPECT_TRUE(results[0].ok()) << results[0].output;
  }
  test::StoreServer server;
  test::expect_all_ok(test::run_processes(2, [&](int rank) {
    auto pg = new_process_group("gloo", server.client(), rank, 2);
    ShardedCheckpointer ckpt({.directory = dir}, pg);
    EXPECT_EQ(ckpt.list(), std::vector<std::string>{ckpt.path_for_step(2)});
    auto net = test::make_shard_net();
    test::shard(net, pg);
    torch::optim::Adam opt(net->parameters(), torch::optim::AdamOptions(1e-2));
    auto progress = ckpt.load_latest(*net, opt);
    ASSERT_TRUE(progress.has_value());
    EXPECT_EQ(progress->step, 2);
    auto state = full_state_dict(*net);
    if (rank == 0) write_params(dir + "/loaded.bin", state);
  }));
  EXPECT_TRUE(read_params(dir + "/loaded.bin").equal(read_params(dir + "/at_step_2.bin")));
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace dpx::fsdp_checkpoint_test
