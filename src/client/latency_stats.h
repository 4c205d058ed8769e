// Summaries of latency samples as `vllm bench serve` reports them: mean, median, p99 and standard
// deviation, with numpy's default (linear) percentile interpolation.
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json.hpp>

namespace dspark {

// The p-th percentile (0..100) of the values, linearly interpolated between closest ranks;
// NaN when empty.
double percentile(std::vector<double> values, double p);

struct LatencySummary {
  size_t count = 0;
  double mean = 0, median = 0, p99 = 0, std = 0;  // NaN when count is 0
};
LatencySummary summarize(const std::vector<double>& values);

// {"count", "mean", "median", "p99", "std"}, each value times `scale` (1e3: seconds to ms);
// null values when empty.
nlohmann::json summary_json(const LatencySummary& s, double scale);

}  // namespace dspark
