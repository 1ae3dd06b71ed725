// The set-up's answer to dpx/comm/diagnostics.h: what `auto` picks. Each backend answers its own
// questions in its folder (comm/backends/gloo/diagnostics.cpp, comm/backends/shm/diagnostics.cpp).
#include "dpx/comm/diagnostics.h"

#include "comm/plan/choose.h"

namespace dpx {

std::string auto_cpu_backend(Store& store, int rank, int size, std::chrono::milliseconds timeout) {
  const auto placement = detail::gather_placement(store, rank, size, at::kCPU, timeout);
  return detail::to_string(detail::choose_backend(detail::Backend::kAuto, false, false,
                                                  [&]() -> const auto& { return placement; }));
}

}  // namespace dpx
