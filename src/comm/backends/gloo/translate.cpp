#include "comm/backends/gloo/translate.h"

#include "comm/backends/c10d/backend_error.h"

namespace dpx::detail {

void rethrow_gloo_error(const std::exception& e, const std::string& where, const std::string& op,
                        std::chrono::milliseconds timeout) {
  // A closed connection is the one certain sign of a dead peer, so it decides first.
  static const BackendErrorWords kGloo{
      "gloo",
      {"onnection closed by peer", "onnection reset", "roken pipe", "onnection refused"},
      "a peer closed its connection",
      {"imed out", "imeout"},
      /*timeout_first=*/false};
  rethrow_backend_error(e, kGloo, where, op, timeout);
}

}  // namespace dpx::detail
