#include "dpx/runtime/process.h"

#include "runtime/cuda/nccl_error_handling.h"
#include "runtime/sigpipe.h"

namespace dpx {

void init_process(const ProcessOptions& options) {
  if (options.ignore_sigpipe) detail::ignore_sigpipe();
  if (options.apply_memory_policy) apply_memory_policy(options.memory_policy);
  if (options.nccl_error_handling) detail::choose_nccl_error_handling();
}

}  // namespace dpx
