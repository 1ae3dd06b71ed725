#pragma once

#include <chrono>

namespace dpx {

// PyTorch's default for process groups and stores.
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

}  // namespace dpx
