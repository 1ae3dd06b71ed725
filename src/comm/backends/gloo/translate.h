// Turns Gloo's exceptions into dpx's typed errors.
#pragma once

#include <chrono>
#include <exception>
#include <string>

namespace dpx::detail {

[[noreturn]] void rethrow_gloo_error(const std::exception& e, const std::string& where,
                                     const std::string& op, std::chrono::milliseconds timeout);

}  // namespace dpx::detail
