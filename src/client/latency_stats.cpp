#include "client/latency_stats.h"

#include <algorithm>
#include <cmath>

namespace dspark {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * double(v.size() - 1);
  const size_t lo = size_t(std::floor(rank)), hi = size_t(std::ceil(rank));
  return v[lo] + (v[hi] - v[lo]) * (rank - double(lo));
}

LatencySummary summarize(const std::vector<double>& v) {
  LatencySummary s;
  s.count = v.size();
  if (v.empty()) {
    s.mean = s.median = s.p99 = s.std = NAN;
    return s;
  }
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  double sq = 0;
  for (double x : v) sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sq / double(v.size()));  // numpy's std: population
  s.median = percentile(v, 50);
  s.p99 = percentile(v, 99);
  return s;
}

nlohmann::json summary_json(const LatencySummary& s, double scale) {
  auto num = [&](double x) {
    return std::isfinite(x) ? nlohmann::json(x * scale) : nlohmann::json();
  };
  return {{"count", s.count},
          {"mean", num(s.mean)},
          {"median", num(s.median)},
          {"p99", num(s.p99)},
          {"std", num(s.std)}};
}

}  // namespace dspark
