// Chi-square goodness of fit for the losslessness tests.
#pragma once

#include <cmath>
#include <vector>

namespace dspark::testing {

// Regularised upper incomplete gamma Q(a, x) (Numerical Recipes: series / continued fraction).
inline double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double gln = std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, del = sum, ap = a;
    for (int n = 0; n < 10000; ++n) {
      ap += 1;
      del *= x / ap;
      sum += del;
      if (std::abs(del) < std::abs(sum) * 1e-15) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - gln);
  }
  double b = x + 1 - a, c = 1 / 1e-300, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::abs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::abs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < 1e-15) break;
  }
  return std::exp(-x + a * std::log(x) - gln) * h;
}

struct ChiSquare {
  double statistic = 0;
  int dof = 0;
  double p_value = 1;
};

// Counts against exact probabilities; cells expecting fewer than 5 are pooled into one.
inline ChiSquare chi_square(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  ChiSquare r;
  double pooled_e = 0, pooled_o = 0;
  int cells = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * double(n);
    if (e < 5) {
      pooled_e += e;
      pooled_o += double(counts[i]);
      continue;
    }
    r.statistic += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
    ++cells;
  }
  if (pooled_e > 0) {
    r.statistic += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-9);
    ++cells;
  }
  r.dof = std::max(1, cells - 1);
  r.p_value = gamma_q(r.dof / 2.0, r.statistic / 2.0);
  return r;
}

}  // namespace dspark::testing
