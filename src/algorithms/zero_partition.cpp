#include "algorithms/zero_partition.h"

#include <algorithm>
#include <numeric>

namespace dpx::detail {

std::vector<std::vector<std::vector<std::size_t>>> zero_partition(
    const std::vector<std::vector<std::int64_t>>& numels, int world) {
  std::vector<std::int64_t> sizes(world, 0);  // elements per rank, over all groups
  std::vector<std::vector<std::vector<std::size_t>>> out;
  for (const auto& group : numels) {
    std::vector<std::size_t> order(group.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return group[a] > group[b]; });
    std::vector<std::vector<std::size_t>> per_rank(world);
    for (auto k : order) {
      // The first rank with the fewest elements.
      const auto rank = std::min_element(sizes.begin(), sizes.end()) - sizes.begin();
      per_rank[rank].push_back(k);
      sizes[rank] += group[k];
    }
    out.push_back(std::move(per_rank));
  }
  return out;
}

}  // namespace dpx::detail
