#include "comm/backends/nccl/translate.h"

#include "comm/backends/c10d/backend_error.h"

namespace dpx::detail {

// Note [NCCL error words]
// ProcessGroupNCCL reports every failure as c10::DistBackendError; what happened is only in the
// text. Its watchdog writes "Watchdog caught collective operation timeout" and a blocking wait
// "timed out"; NCCL itself names a peer that vanished "remote process exited or there was a
// network error" (ncclRemoteError), and a socket the peer closed "Connection closed by peer" or
// "Connection reset" (ncclSystemError). A timeout decides first (the watchdog's message may
// quote a peer's error too); unknown texts stay DistributedError, with c10d's message kept.
void rethrow_nccl_error(const std::exception& e, const std::string& where, const std::string& op,
                        std::chrono::milliseconds timeout) {
  static const BackendErrorWords kNccl{
      "nccl",
      {"remote process exited", "onnection closed", "onnection reset", "ncclRemoteError"},
      "a peer is gone",
      {"imed out", "imeout"},
      /*timeout_first=*/true};
  rethrow_backend_error(e, kNccl, where, op, timeout);
}

}  // namespace dpx::detail
