// HostSyncsForbidden: CUDA's sync-debug mode (c10's warning state) set to error for a scope.
#include "dpx/runtime/cuda.h"

#if DPX_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace dpx::cuda {

#if DPX_WITH_CUDA

HostSyncsForbidden::HostSyncsForbidden()
    : previous_(static_cast<int>(c10::cuda::warning_state().get_sync_debug_mode())) {
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
}

HostSyncsForbidden::~HostSyncsForbidden() {
  c10::cuda::warning_state().set_sync_debug_mode(static_cast<c10::cuda::SyncDebugMode>(previous_));
}

#else

HostSyncsForbidden::HostSyncsForbidden() = default;
HostSyncsForbidden::~HostSyncsForbidden() = default;

#endif

}  // namespace dpx::cuda
