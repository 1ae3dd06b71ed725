#include "comm/backends/c10d/backend_error.h"

#include "dpx/errors.h"

namespace dpx::detail {
namespace {

bool has_any(const std::string& msg, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    if (msg.find(w) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

void rethrow_backend_error(const std::exception& e, const BackendErrorWords& words,
                           const std::string& where, const std::string& op,
                           std::chrono::milliseconds timeout) {
  if (dynamic_cast<const DistributedError*>(&e) != nullptr) {
    throw;
  }
  std::string msg = e.what();
  if (auto nl = msg.find("\nException raised from"); nl != std::string::npos) msg.resize(nl);
  const std::string head = where + words.backend + " " + op;
  const bool lost = has_any(msg, words.peer_lost), late = has_any(msg, words.timeout);
  if (late && (words.timeout_first || !lost)) {
    throw TimeoutError(head + " did not finish within " + std::to_string(timeout.count()) +
                       " ms (" + msg + "). A peer is stuck or gone; check the other ranks' "
                       "logs, or raise the timeout if the job is just slow.");
  }
  if (lost) {
    throw PeerLostError(head + " failed: " + words.lost_says + " (" + msg +
                        "). Another rank has probably died; see its log.");
  }
  throw DistributedError(head + " failed: " + msg);
}

}  // namespace dpx::detail
