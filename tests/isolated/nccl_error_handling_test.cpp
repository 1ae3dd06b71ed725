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

std::string mode() {
  const char* v = std::getenv("TORCH_NCCL_ASYNC_ERROR_HANDLING");
  return v ? v : "(unset)";
}

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
