#include "comm/nccl/translate.h"

#include "comm/backend_error.h"
#include "dpx/comm/errors.h"

namespace dpx::detail {

// Note [NCCL error words]
// ProcessGroupNCCL reports every failure as c10::DistBackendError; what happened is only in the
// text. Its watchdog writes "Watchdog caught collective operation timeout" and a blocking wait
// "timed out"; NCCL itself names a peer that vanished "remote process exited or there was a
// network error" (ncclRemoteError), and a socket the peer closed "Connection closed by peer" or
// "Connection reset" (ncclSystemError). The first match decides; unknown texts stay
// DistributedError, with c10d's message kept.
void rethrow_nccl_error(const std::exception& e, const std::string& where, const std::string& op,
                        std::chrono::milliseconds timeout) {
  if (dynamic_cast<const DistributedError*>(&e) != nullptr) {
    throw;
  }
  const std::string msg = backend_error_text(e);
  if (contains(msg, "imed out") || contains(msg, "imeout")) {
    throw TimeoutError(where + "nccl " + op + " did not finish within " +
                       std::to_string(timeout.count()) + " ms (" + msg +
                       "). A peer is stuck or gone; check the other ranks' logs, or raise the "
                       "timeout if the job is just slow.");
  }
  if (contains(msg, "remote process exited") || contains(msg, "onnection closed") ||
      contains(msg, "onnection reset") || contains(msg, "ncclRemoteError")) {
    throw PeerLostError(where + "nccl " + op + " failed: a peer is gone (" + msg +
                        "). Another rank has probably died; see its log.");
  }
  throw DistributedError(where + "nccl " + op + " failed: " + msg);
}

}  // namespace dpx::detail
