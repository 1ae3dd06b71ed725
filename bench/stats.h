// Statistics the benchmarks report.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace dpx::bench {

// The median (mean of the two middle values for an even count); NaN when there are none.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace dpx::bench
