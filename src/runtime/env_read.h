// Parsers of single environment variables. Each subsystem reads its own variables with them,
// when it is set up, so a malformed variable breaks only the subsystem that uses it; errors
// name the variable, the value found and what it must be.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dpx::detail {

// The value, or nullopt when unset or empty.
std::optional<std::string> env_string(const char* name);

// An integer in [min, max], or nullopt when unset.
std::optional<std::int64_t> env_int(const char* name, std::int64_t min = INT32_MIN,
                                    std::int64_t max = INT32_MAX);

// A number > 0, or nullopt when unset.
std::optional<double> env_positive(const char* name);

}  // namespace dpx::detail
