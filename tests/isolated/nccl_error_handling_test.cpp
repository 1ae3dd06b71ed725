// Note [NCCL error handling], tested: init_process() (called by init_process_group unless told
// not to) sets TORCH_NCCL_ASYNC_ERROR_HANDLING=2 once, in a dpx built with CUDA, so that c10d's
// NCCL groups fail with typed errors; nothing sets it around a group's construction any more.
// Each test runs in a child of a process that never made these choices itself.
#include <stdlib.h>

#include <gmock/gmock.h>
#include <torch/torch.h>

#include "dpx/dpx.h"
#include "support/expect_throws.h"
#include "support/harness.h"

namespace dpx {
namespace {

using test::run_in_child;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "(unset)";
}

std::string mode() { return env("TORCH_NCCL_ASYNC_ERROR_HANDLING"); }
std::string dump_wait() { return env("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"); }

TEST(NcclErrorHandling, InitProcessChoosesCleanUpOnlyWhereDpxHasCuda) {
  run_in_child([] {
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", 1);  // what torchrun and dpxrun give
    init_process();
    EXPECT_EQ(mode(), cuda::built() ? "2" : "1");
  });
  run_in_child([] {
    ::unsetenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
    auto pg = test::init_single_rank(ProcessOptions{});
    EXPECT_EQ(mode(), cuda::built() ? "2" : "(unset)");
  });
}

TEST(NcclErrorHandling, LeftAloneWhenTheProgramSaysSo) {
  run_in_child([] {
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", 1);
    ::setenv("DPX_NCCL_ERROR_HANDLING", "c10d", 1);
    init_process();
    EXPECT_EQ(mode(), "1");
  });
  run_in_child([] {
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", 1);
    ProcessOptions o;
    o.nccl_error_handling = false;
    init_process(o);
    auto pg = test::init_single_rank(std::nullopt);
    EXPECT_EQ(mode(), "3");
  });
}

// c10d's watchdog sleeps 4 x this wait after a failure, and destroying the group joins it; dpx
// shortens it unless the program set it, turned the flight recorder on, or handles NCCL errors
// itself (Note [Destroying a failed NCCL group promptly]).
TEST(NcclErrorHandling, TheFlightRecorderDumpWaitIsShortUnlessTheProgramWantsIt) {
  run_in_child([] {
    ::unsetenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC");
    init_process();
    EXPECT_EQ(dump_wait(), cuda::built() ? "250" : "(unset)");
  });
  run_in_child([] {
    ::setenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "30000", 1);
    init_process();
    EXPECT_EQ(dump_wait(), "30000");
  });
  run_in_child([] {
    ::unsetenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC");
    ::setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000", 1);
    init_process();
    EXPECT_EQ(dump_wait(), "(unset)");
  });
  run_in_child([] {
    ::unsetenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC");
    ::setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "0", 1);
    init_process();
    EXPECT_EQ(dump_wait(), cuda::built() ? "250" : "(unset)");
  });
  run_in_child([] {
    ::unsetenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC");
    ::setenv("DPX_NCCL_ERROR_HANDLING", "c10d", 1);
    init_process();
    EXPECT_EQ(dump_wait(), "(unset)");
  });
}

// A dpx with CUDA names a bad value; one without reads no NCCL variable at all.
TEST(NcclErrorHandling, AnUnknownChoiceIsAClearErrorWhereNcclExists) {
  run_in_child([] {
    ::setenv("DPX_NCCL_ERROR_HANDLING", "sometimes", 1);
    if (cuda::built()) {
      EXPECT_THAT(test::expect_throws<c10::Error>([] { init_process(); }),
                  ::testing::HasSubstr("DPX_NCCL_ERROR_HANDLING is 'sometimes'; use dpx"));
    } else {
      init_process();
      EXPECT_EQ(mode(), "(unset)");
    }
  });
}

// Once per process: a later init_process() (a second group) leaves the environment alone.
TEST(NcclErrorHandling, MadeOncePerProcess) {
  run_in_child([] {
    init_process();
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1", 1);
    init_process();
    EXPECT_EQ(mode(), "1");
  });
}

}  // namespace
}  // namespace dpx
