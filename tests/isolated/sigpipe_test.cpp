// Note [SIGPIPE]: process groups and TCP stores make a dead peer an error, not a SIGPIPE death.
// Each test runs in a child of a process that never created a group or a store itself.
#include <signal.h>

#include <torch/torch.h>

#include "dpx/dpx.h"
#include "harness.h"

namespace dpx {
namespace {

using test::run_in_child;

void (*sigpipe_handler())(int) {
  struct sigaction current {};
  ::sigaction(SIGPIPE, nullptr, &current);
  return current.sa_handler;
}

void custom_handler(int) {}

TEST(Sigpipe, AProcessGroupIgnoresIt) {
  run_in_child([] {
    ASSERT_EQ(sigpipe_handler(), SIG_DFL);
    auto pg = new_process_group("gloo", Store::hash(), 0, 1);
    EXPECT_EQ(sigpipe_handler(), SIG_IGN);
  });
}

TEST(Sigpipe, ATcpStoreIgnoresIt) {
  run_in_child([] {
    ASSERT_EQ(sigpipe_handler(), SIG_DFL);
    TcpStoreOptions o;
    o.is_server = true;
    auto store = Store::tcp(o);
    EXPECT_EQ(sigpipe_handler(), SIG_IGN);
  });
}

TEST(Sigpipe, TheProgramsOwnHandlerIsLeftAlone) {
  run_in_child([] {
    ::signal(SIGPIPE, custom_handler);
    auto pg = new_process_group("gloo", Store::hash(), 0, 1);
    EXPECT_EQ(sigpipe_handler(), &custom_handler);
  });
}

}  // namespace
}  // namespace dpx
