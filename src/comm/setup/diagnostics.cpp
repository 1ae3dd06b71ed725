#include "dpx/comm/diagnostics.h"

#include "comm/backends/gloo/device.h"
#include "comm/backends/shm/segment.h"
#include "comm/setup/choose.h"
#include "runtime/env_read.h"

namespace dpx {

std::string gloo_listen_address(const Store* store) {
  return detail::choose_gloo_listen(detail::gloo_listen_inputs(store), "").describe();
}

std::string auto_cpu_backend(Store& store, int rank, int size, std::chrono::milliseconds timeout) {
  const auto placement = detail::gather_placement(store, rank, size, at::kCPU, timeout);
  return detail::to_string(detail::choose_backend(detail::Backend::kAuto, false, false,
                                                  [&]() -> const auto& { return placement; }));
}

std::int64_t shm_slot_bytes() {
  return detail::env_int("DPX_SHM_SLOT_BYTES", 4096)
      .value_or(static_cast<std::int64_t>(detail::shm::SegmentOptions{}.slot_bytes));
}

}  // namespace dpx
