// The gloo backend's answer to dpx/comm/diagnostics.h: where a group would listen.
#include "dpx/comm/diagnostics.h"

#include "comm/backends/gloo/gloo_device.h"

namespace dpx {

std::string gloo_listen_address(const Store* store) {
  return detail::choose_gloo_listen(detail::gloo_listen_inputs(store), "").describe();
}

}  // namespace dpx
