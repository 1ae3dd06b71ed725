// The size bounds of the mpi all-reduce's data paths (sizes.h).
#include "comm/backends/mpi/sizes.h"

#include "comm/backends/mpi/tags.h"

namespace dpx::detail::mpi {

bool pair_sizes(std::int64_t bytes, int size, ReduceOp op) {
  return size == 2 && (op == ReduceOp::kSum || op == ReduceOp::kAvg) &&
         ((bytes > 0 && bytes <= kPairSmallBytes) ||
          (bytes >= kPairBytesFrom && bytes < kPairBytesBelow));
}

bool ring_sizes(std::int64_t bytes, int size, int tag_ub) {
  const std::int64_t least = size == 2 ? kRingBytesTwoRanks : kRingChunkBytes * size;
  return size > 1 && bytes >= least && round_stride(tag_ub) >= 2 * (size - 1);
}

}  // namespace dpx::detail::mpi
