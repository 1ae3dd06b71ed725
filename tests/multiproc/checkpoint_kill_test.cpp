// A writer SIGKILLed in the middle of a save never costs the previous checkpoint.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>

#include "dpx/checkpoint/checkpointer.h"

namespace {

TEST(CheckpointKill, KillDuringSaveKeepsThePreviousCheckpoint) {
  char tmpl[] = "/tmp/dpx-ckpt-kill-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    torch::nn::Linear net(4, 2);
    torch::optim::SGD opt(net->parameters(), 0.1);
    dpx::CheckpointerOptions options{.directory = dir};
    dpx::Checkpointer(options, nullptr).save(*net, opt, {.step = 1});
    options.write.after_partial_write = [&] {
      (void)!::write(ready[1], "x", 1);  // the temporary file holds part of the data now
      ::pause();                         // wait for SIGKILL
    };
    dpx::Checkpointer(options, nullptr).save(*net, opt, {.step = 2});
    ::_exit(3);  // not reached
  }
  ::close(ready[1]);
  pollfd pfd{ready[0], POLLIN, 0};
  const int polled = ::poll(&pfd, 1, 60000);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ASSERT_EQ(polled, 1) << "the child never reached the middle of its second save";
  ASSERT_TRUE(WIFSIGNALED(status));

  dpx::Checkpointer ckpt({.directory = dir}, nullptr);
  EXPECT_EQ(ckpt.list(), std::vector<std::string>{ckpt.path_for_step(1)});
  const std::string leftover = ckpt.path_for_step(2) + ".tmp." + std::to_string(child);
  EXPECT_EQ(::access(leftover.c_str(), F_OK), 0) << "the killed writer's partial file";
  torch::nn::Linear net(4, 2);
  torch::optim::SGD opt(net->parameters(), 0.1);
  auto progress = ckpt.load_latest(*net, opt);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->step, 1);

  ckpt.save(*net, opt, {.step = 3});  // the next save clears the leftover
  EXPECT_NE(::access(leftover.c_str(), F_OK), 0);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
