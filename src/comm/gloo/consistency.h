// Cross-rank check that every rank calls the same collective with the same dtype and size.
// Gloo aborts the process on a size mismatch and silently mixes bytes on a dtype mismatch of
// equal width, so with DPX_DEBUG=DETAIL (as PyTorch's TORCH_DISTRIBUTED_DEBUG=DETAIL) each
// collective is preceded by an allgather of a small fingerprint. Costs one round trip per
// collective; off by default.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <string>

namespace dpx::detail {

struct Fingerprint {
  int64_t op;     // which collective (an index into kOpNames)
  int64_t dtype;  // at::ScalarType
  int64_t numel;
  int64_t extra;  // root of a broadcast, reduce op of a reduction
};

// Throws DistributedError on every rank if any rank's fingerprint differs.
void check_consistency(c10d::ProcessGroupGloo& pg, const Fingerprint& mine, int rank, int size,
                       const std::string& where);

}  // namespace dpx::detail
