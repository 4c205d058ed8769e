#include "spec_decode/calibration.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dspark {

namespace {
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
}  // namespace

double expected_calibration_error(const std::vector<double>& pred, const std::vector<int>& label, int bins) {
  if (pred.empty()) return 0.0;
  std::vector<double> conf(size_t(bins), 0.0), acc(size_t(bins), 0.0);
  std::vector<int> count(size_t(bins), 0);
  for (size_t i = 0; i < pred.size(); ++i) {
    const int b = std::min(bins - 1, std::max(0, int(pred[i] * bins)));
    conf[size_t(b)] += pred[i];
    acc[size_t(b)] += label[i];
    ++count[size_t(b)];
  }
  double ece = 0;
  for (int b = 0; b < bins; ++b)
    if (count[size_t(b)]) ece += std::abs(conf[size_t(b)] - acc[size_t(b)]);
  return ece / double(pred.size());
}

double auroc(const std::vector<double>& pred, const std::vector<int>& label) {
  std::vector<size_t> idx(pred.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return pred[a] < pred[b]; });
  // Mann-Whitney U with average ranks for ties.
  double pos = 0, neg = 0, rank_sum = 0;
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j < idx.size() && pred[idx[j]] == pred[idx[i]]) ++j;
    const double avg_rank = 0.5 * double(i + 1 + j);
    for (size_t k = i; k < j; ++k)
      if (label[idx[k]]) rank_sum += avg_rank;
    i = j;
  }
  for (int l : label) (l ? pos : neg) += 1;
  if (pos == 0 || neg == 0) return 0.5;
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

CalibrationReport fit_sequential_temperature_scaling(const std::vector<RoundRecord>& rounds, int K, int grid) {
  CalibrationReport r;
  r.temperatures.assign(size_t(K), 1.f);
  std::vector<double> candidates;
  for (int g = 0; g < grid; ++g) candidates.push_back(0.125 * std::pow(64.0, double(g) / double(std::max(1, grid - 1))));
  // Cumulative products with the temperatures fixed so far (position k-1), per round.
  std::vector<double> prefix(rounds.size(), 1.0), prefix_raw(rounds.size(), 1.0);
  std::vector<double> all_before, all_after;
  std::vector<int> all_labels;
  for (int k = 0; k < K; ++k) {
    std::vector<size_t> rows;
    std::vector<int> labels;
    for (size_t i = 0; i < rounds.size(); ++i)
      if (int(rounds[i].logits.size()) > k) {
        rows.push_back(i);
        labels.push_back(rounds[i].accepted > k ? 1 : 0);
      }
    r.samples.push_back(int(rows.size()));
    auto products = [&](double T, const std::vector<double>& base) {
      std::vector<double> p;
      for (size_t i : rows) p.push_back(base[i] * sigmoid(double(rounds[i].logits[size_t(k)]) / T));
      return p;
    };
    const auto before = products(1.0, prefix_raw);
    double best_T = 1.0, best_ece = 1e300;
    for (double T : candidates) {
      const double e = expected_calibration_error(products(T, prefix), labels);
      if (e < best_ece - 1e-12) {
        best_ece = e;
        best_T = T;
      }
    }
    r.temperatures[size_t(k)] = float(best_T);
    const auto after = products(best_T, prefix);
    r.ece_before.push_back(expected_calibration_error(before, labels));
    r.ece_after.push_back(rows.empty() ? 0.0 : best_ece);
    all_before.insert(all_before.end(), before.begin(), before.end());
    all_after.insert(all_after.end(), after.begin(), after.end());
    all_labels.insert(all_labels.end(), labels.begin(), labels.end());
    for (size_t j = 0; j < rows.size(); ++j) {
      prefix[rows[j]] = after[j];
      prefix_raw[rows[j]] = before[j];
    }
  }
  r.auroc_before = auroc(all_before, all_labels);
  r.auroc_after = auroc(all_after, all_labels);
  return r;
}

}  // namespace dspark
