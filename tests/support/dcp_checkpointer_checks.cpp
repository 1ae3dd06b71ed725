#include "support/dcp_checkpointer_checks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "dpx/checkpoint/dcp_checkpointer.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/errors.h"
#include "dpx/runtime/files.h"
#include "support/dcp_resume.h"

namespace dpx::test {

void async_save_while_training(const std::shared_ptr<ProcessGroup>& pg, bool sharded,
                               const std::string& dir) {
  DcpReplica r(sharded, pg);
  auto adam = dcp_adam(r);
  r.train(adam, 3);
  // The writer stops after its first bytes until training has changed everything.
  std::atomic<bool> trained{false};
  DcpCheckpointerOptions options{.directory = dir, .async_save = true};
  options.write.after_partial_write = [&trained] {
    while (!trained) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  DcpCheckpointer ckpt(options, pg);
  const auto model = r.whole_state(sharded);
  const auto optim = full_optimizer_state_dict(*r.net, adam, {.rank0_only = false});
  if (pg->rank() == 0) {  // now: unsharded, these are the live tensors training changes
    torch_save(model, dir + "/at_step_3.pt");
    torch_save(optim, dir + "/optim_at_step_3.pt");
  }
  EXPECT_EQ(ckpt.save(*r.net, adam, kDcpProgress), ckpt.path_for_step(3));
  r.train(adam, 2);  // while it is written
  trained = true;
  ckpt.wait();
  EXPECT_EQ(ckpt.list(), std::vector<std::string>{ckpt.path_for_step(3)});
}

std::vector<std::string> dcp_step_files(int world) {
  std::vector<std::string> files{".metadata"};
  for (int r = 0; r < world; ++r) files.push_back("__" + std::to_string(r) + "_0.distcp");
  std::sort(files.begin(), files.end());
  return files;
}

void expect_async_saved_state_resumes(const std::shared_ptr<ProcessGroup>& pg, bool sharded,
                                      const std::string& dir) {
  DcpReplica r(sharded, pg);
  torch::optim::Adam adam(r.net->parameters());
  const auto progress = DcpCheckpointer({.directory = dir}, pg).load_latest(*r.net, adam);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->step, kDcpProgress.step);
  expect_same_dict(r.whole_state(sharded), torch_load(dir + "/at_step_3.pt").toGenericDict(),
                   "model");
  const auto optim = full_optimizer_state_dict(*r.net, adam, {.rank0_only = false});
  expect_same_dict(optim.toGenericDict().at("state").toGenericDict(),
                   torch_load(dir + "/optim_at_step_3.pt").toGenericDict().at("state")
                       .toGenericDict(), "optimizer state");
}

void expect_failed_async_save_reported(const std::shared_ptr<ProcessGroup>& pg,
                                       const std::string& dir) {
  const int rank = pg->rank();
  DcpReplica r(/*sharded=*/true, pg);
  auto adam = dcp_adam(r);
  DcpCheckpointerOptions options{.directory = dir, .async_save = true};
  DcpCheckpointer ckpt(options, pg);
  ckpt.save(*r.net, adam, {.step = 1});
  ckpt.wait();
  if (rank == 1) {
    options.write.after_partial_write = [] { throw std::runtime_error("disk full (test)"); };
  }
  DcpCheckpointer failing(options, pg);
  failing.save(*r.net, adam, {.step = 2});
  try {
    failing.wait();
    ADD_FAILURE() << "the failed save was not reported";
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("failed on rank(s) 0, 1"), std::string::npos) << what;
    if (rank == 1) EXPECT_NE(what.find("disk full (test)"), std::string::npos) << what;
    if (rank == 0) EXPECT_NE(what.find("rank(s) 1 could not write"), std::string::npos) << what;
  }
  EXPECT_EQ(ckpt.list(), std::vector<std::string>{ckpt.path_for_step(1)});
  failing.wait();  // reported once: nothing in flight now
  ckpt.save(*r.net, adam, {.step = 3});
  ckpt.wait();
  EXPECT_EQ(ckpt.list().front(), ckpt.path_for_step(3));
}

void expect_keep_last_and_only_complete(const std::shared_ptr<ProcessGroup>& pg,
                                        const std::string& dir) {
  DcpReplica r(/*sharded=*/false, pg);
  auto adam = dcp_adam(r);
  DcpCheckpointer ckpt({.directory = dir, .keep_last = 2}, pg);
  for (int64_t step = 1; step <= 3; ++step) ckpt.save(*r.net, adam, {.step = step});
  EXPECT_EQ(ckpt.list(), (std::vector<std::string>{ckpt.path_for_step(3),
                                                   ckpt.path_for_step(2)}));
  EXPECT_FALSE(path_exists(ckpt.path_for_step(1)));
  pg->barrier()->wait();
  if (pg->rank() == 0) make_dirs(ckpt.path_for_step(9));
  pg->barrier()->wait();
  EXPECT_EQ(ckpt.list().front(), ckpt.path_for_step(3));
  const auto progress = ckpt.load_latest(*r.net, adam);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->step, 3);
}

}  // namespace dpx::test
