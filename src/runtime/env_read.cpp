#include "runtime/env_read.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <cstdlib>

namespace dpx::detail {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<std::int64_t> env_int(const char* name, std::int64_t min, std::int64_t max) {
  auto v = env_string(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  TORCH_CHECK(errno == 0 && end != v->c_str() && *end == '\0', "environment variable ", name,
              " must be an integer, got '", *v, "'");
  TORCH_CHECK(x >= min, "environment variable ", name, " must be >= ", min, ", got '", *v, "'");
  TORCH_CHECK(x <= max, "environment variable ", name, " must be <= ", max, ", got '", *v, "'");
  return static_cast<std::int64_t>(x);
}

std::optional<double> env_positive(const char* name) {
  auto v = env_string(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v->c_str(), &end);
  TORCH_CHECK(end != v->c_str() && *end == '\0' && x > 0 && x < 1e18, "environment variable ",
              name, " must be a positive number, got '", *v, "'");
  return x;
}

}  // namespace dpx::detail
