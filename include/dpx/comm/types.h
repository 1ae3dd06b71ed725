#pragma once

#include <chrono>

namespace dpx {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

const char* to_string(ReduceOp op);

// PyTorch's default for process groups and stores.
constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

}  // namespace dpx
