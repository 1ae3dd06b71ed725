// The shm backend's answer to dpx/comm/diagnostics.h: the size of a segment's slot.
#include "dpx/comm/diagnostics.h"

#include "comm/backends/shm/segment.h"
#include "runtime/env_read.h"

namespace dpx {

std::int64_t shm_slot_bytes() {
  return detail::env_int("DPX_SHM_SLOT_BYTES", 4096)
      .value_or(static_cast<std::int64_t>(detail::shm::SegmentOptions{}.slot_bytes));
}

}  // namespace dpx
