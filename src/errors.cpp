#include "dpx/errors.h"

#include <unistd.h>

#include <c10/util/Type.h>

#include <climits>
#include <utility>

namespace dpx {

std::string where(int rank, int world_size) {
  char host[HOST_NAME_MAX + 1] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) {
    host[0] = '?';
  }
  return "[rank " + std::to_string(rank) + "/" + std::to_string(world_size) + " " + host + ":" +
         std::to_string(getpid()) + "] ";
}

namespace {

// "<type>|<message>" of the exception a replica threw.
std::string describe(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const c10::Error& e) {
    return c10::demangle(typeid(e).name()) + "|" + e.what_without_backtrace();
  } catch (const std::exception& e) {
    return c10::demangle(typeid(e).name()) + "|" + e.what();
  } catch (...) {
    return "unknown exception|(not derived from std::exception)";
  }
}

std::string replica_message(int64_t replica, c10::Device device, std::exception_ptr error) {
  auto text = describe(error);
  auto bar = text.find('|');
  return "Caught " + text.substr(0, bar) + " in replica " + std::to_string(replica) +
         " on device " + device.str() + ".\nOriginal message:\n" + text.substr(bar + 1);
}

}  // namespace

ReplicaError::ReplicaError(int64_t replica, c10::Device device, std::exception_ptr original)
    // No backtrace: `{}` is an empty one both where it is a string (LibTorch 1.13) and where it
    // is a lazily computed value (2.x).
    : c10::Error(replica_message(replica, device, original), /*backtrace=*/{}),
      replica_(replica),
      device_(device),
      original_(std::move(original)) {}

}  // namespace dpx
