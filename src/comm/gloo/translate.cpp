#include "comm/gloo/translate.h"

#include "comm/backend_error.h"
#include "dpx/comm/errors.h"

namespace dpx::detail {

void rethrow_gloo_error(const std::exception& e, const std::string& where, const std::string& op,
                        std::chrono::milliseconds timeout) {
  if (dynamic_cast<const DistributedError*>(&e) != nullptr) {
    throw;
  }
  const std::string msg = backend_error_text(e);
  if (contains(msg, "onnection closed by peer") || contains(msg, "onnection reset") ||
      contains(msg, "roken pipe") || contains(msg, "onnection refused")) {
    throw PeerLostError(where + "gloo " + op + " failed: a peer closed its connection (" + msg +
                        "). Another rank has probably died; see its log.");
  }
  if (contains(msg, "imed out") || contains(msg, "imeout")) {
    throw TimeoutError(where + "gloo " + op + " did not finish within " +
                       std::to_string(timeout.count()) + " ms (" + msg +
                       "). A peer is stuck or gone; check the other ranks' logs, or raise the "
                       "timeout if the job is just slow.");
  }
  throw DistributedError(where + "gloo " + op + " failed: " + msg);
}

}  // namespace dpx::detail
