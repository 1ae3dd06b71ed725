// The parameter partition of ZeroRedundancyOptimizer (Note [ZeRO partition]), apart from tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dpx::detail {

// numels[g][k]: the element count of parameter k of group g. Returns [g][rank]: the indices k
// that `rank` owns, largest first.
std::vector<std::vector<std::vector<std::size_t>>> zero_partition(
    const std::vector<std::vector<std::int64_t>>& numels, int world);

}  // namespace dpx::detail
