// A worker's connection to its launcher's store, from the address the launcher gives it:
// "dpx://host:port" is dpx's own store (dpxrun's c10d rendezvous; the job token goes with it),
// "host:port" a c10d TCPStore (dpxrun's static rendezvous store).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dpx/store/store.h"

namespace dpx::detail {

// `variable` names where the address came from, for the error a malformed one raises.
std::shared_ptr<Store> connect_agent_store(const std::string& address, const char* variable,
                                           std::chrono::milliseconds timeout);

}  // namespace dpx::detail
