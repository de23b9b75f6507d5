// SPDX-License-Identifier: MIT
// The benchmarks' summaries of repeated measurements.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace bench {

/// Median (the mean of the middle two for an even count) and range, e.g. of per-round ratios.
struct Spread {
  double median = 0, min = 0, max = 0;
};

inline Spread spread(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return {n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2, v.front(), v.back()};
}

inline double median(const std::vector<double>& v) { return spread(v).median; }

}  // namespace bench
