// init_process() (called by init_process_group unless told not to) makes a dead peer an error,
// not a SIGPIPE death (Note [SIGPIPE]); groups and stores alone change nothing process-wide.
// Each test runs in a child of a process that never made these choices itself.
#include <signal.h>

#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/harness.h"

namespace dpx {
namespace {

using test::run_in_child;

void (*sigpipe_handler())(int) {
  struct sigaction current {};
  ::sigaction(SIGPIPE, nullptr, &current);
  return current.sa_handler;
}

void custom_handler(int) {}

TEST(Sigpipe, InitProcessIgnoresIt) {
  run_in_child([] {
    ASSERT_EQ(sigpipe_handler(), SIG_DFL);
    init_process();
    EXPECT_EQ(sigpipe_handler(), SIG_IGN);
  });
}

TEST(Sigpipe, InitProcessGroupIgnoresItByDefault) {
  run_in_child([] {
    ASSERT_EQ(sigpipe_handler(), SIG_DFL);
    auto pg = test::init_single_rank(ProcessOptions{});
    EXPECT_EQ(sigpipe_handler(), SIG_IGN);
  });
}

TEST(Sigpipe, InitProcessGroupLeavesItWhenToldTo) {
  run_in_child([] {
    auto pg = test::init_single_rank(std::nullopt);
    EXPECT_EQ(sigpipe_handler(), SIG_DFL);
    ProcessOptions no_sigpipe;
    no_sigpipe.ignore_sigpipe = false;
    pg = test::init_single_rank(no_sigpipe);
    EXPECT_EQ(sigpipe_handler(), SIG_DFL);
  });
}

TEST(Sigpipe, GroupsAndStoresLeaveItAlone) {
  run_in_child([] {
    auto pg = new_process_group("gloo", Store::hash(), 0, 1);
    TcpStoreOptions o;
    o.is_server = true;
    auto store = Store::tcp(o);
    EXPECT_EQ(sigpipe_handler(), SIG_DFL);
  });
}

TEST(Sigpipe, TheProgramsOwnHandlerIsLeftAlone) {
  run_in_child([] {
    ::signal(SIGPIPE, custom_handler);
    init_process();
    EXPECT_EQ(sigpipe_handler(), &custom_handler);
  });
}

}  // namespace
}  // namespace dpx
