#include "runtime/cuda/nccl_error_handling.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <mutex>

#include "dpx/runtime/cuda.h"
#include "runtime/env_read.h"

namespace dpx::detail {
namespace {

constexpr const char* kVariable = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
constexpr const char* kCleanUpOnly = "2";
// The flight recorder's dump wait (Note [Destroying a failed NCCL group promptly]).
constexpr const char* kDumpWait = "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC";
constexpr const char* kDumpWaitMs = "250";
constexpr const char* kTraceBuffer = "TORCH_NCCL_TRACE_BUFFER_SIZE";

// Whether the program asked for c10d's flight recorder, whose dump the wait is for.
bool flight_recorder_on() {
  const auto size = env_string(kTraceBuffer);
  return size && *size != "0";
}

}  // namespace

bool dpx_handles_nccl_errors() {
  const auto choice = env_string("DPX_NCCL_ERROR_HANDLING").value_or("dpx");
  TORCH_CHECK(choice == "dpx" || choice == "c10d", "DPX_NCCL_ERROR_HANDLING is '", choice,
              "'; use dpx (typed errors, the default) or c10d (TORCH_NCCL_ASYNC_ERROR_HANDLING "
              "decides)");
  return choice == "dpx";
}

// Once per process: a second init_process() (a second group, a new group after a failure)
// comes when c10d's, Gloo's and DDP's threads may be reading the environment.
void choose_nccl_error_handling() {
  if (!cuda::built()) return;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!dpx_handles_nccl_errors()) return;
    if (!nccl_errors_reach_dpx()) ::setenv(kVariable, kCleanUpOnly, 1);
    if (!env_string(kDumpWait) && !flight_recorder_on()) ::setenv(kDumpWait, kDumpWaitMs, 1);
  });
}

bool nccl_errors_reach_dpx() {
  const auto mode = env_string(kVariable);
  return mode && *mode == kCleanUpOnly;
}

}  // namespace dpx::detail
