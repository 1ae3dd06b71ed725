// Turns c10d's store exceptions into dpx's typed errors, naming the store and what was tried.
#pragma once

#include <chrono>
#include <exception>
#include <string>

namespace dpx::detail {

[[noreturn]] void rethrow_store_error(const std::exception& e, const std::string& store,
                                      const std::string& action,
                                      std::chrono::milliseconds timeout);

}  // namespace dpx::detail
