#include "store/translate.h"

#include <c10/util/Exception.h>

#include "dpx/errors.h"

namespace dpx::detail {
namespace {

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

std::string first_line(const char* what) {
  std::string s(what);
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

void rethrow_store_error(const std::exception& e, const std::string& store,
                         const std::string& action, std::chrono::milliseconds timeout) {
  const std::string msg = first_line(e.what());
  const std::string head = "could not " + action + " " + store + ": ";
  // dpx's own TCP store raises typed errors with the reason; add what was tried and the advice.
  if (dynamic_cast<const TimeoutError*>(&e) != nullptr) {
    throw TimeoutError(head + "no answer within " + std::to_string(timeout.count()) + " ms (" +
                       msg + "). Check that the master process is running and that "
                       "MASTER_ADDR/MASTER_PORT point at it, or raise the timeout.");
  }
  if (dynamic_cast<const PeerLostError*>(&e) != nullptr) {
    throw PeerLostError(head + "the store server went away (" + msg + "). The process hosting "
                        "it (usually rank 0 or the launcher) has probably exited; see its log.");
  }
  if (dynamic_cast<const DistributedError*>(&e) != nullptr) {
    throw DistributedError(head + msg);
  }
  if (contains(msg, "imeout") || contains(msg, "imed out")) {
    throw TimeoutError(head + "no answer within " + std::to_string(timeout.count()) +
                       " ms (" + msg + "). Check that the master process is running and that "
                       "MASTER_ADDR/MASTER_PORT point at it, or raise the timeout.");
  }
  if (contains(msg, "ddress already in use")) {
    throw DistributedError(head + "the port is already in use (" + msg +
                           "). Pick another MASTER_PORT, or port 0 for a free one.");
  }
  if (contains(msg, "onnection reset") || contains(msg, "roken pipe") ||
      contains(msg, "onnection closed") || contains(msg, "onnection refused")) {
    throw PeerLostError(head + "the store server went away (" + msg +
                        "). The process hosting it (usually rank 0 or the launcher) has "
                        "probably exited; see its log.");
  }
  throw DistributedError(head + msg);
}

}  // namespace dpx::detail
