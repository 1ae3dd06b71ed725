// c10d's NCCL errors as dpx's typed errors. Plain string work, apart from CUDA, so that a
// machine without a GPU tests it.
#pragma once

#include <chrono>
#include <exception>
#include <string>

namespace dpx::detail {

// Rethrows `e` (c10d's DistBackendError and friends, from ProcessGroupNCCL) as TimeoutError,
// PeerLostError or DistributedError; a dpx error passes through unchanged.
[[noreturn]] void rethrow_nccl_error(const std::exception& e, const std::string& where,
                                     const std::string& op, std::chrono::milliseconds timeout);

}  // namespace dpx::detail
