// Chi-square goodness of fit for the losslessness tests.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "model/forward.h"
#include "runtime/generate.h"
#include "sample/sampler.h"

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

// Processes a prefix's logits row in place before sampling: `output` is the tokens after the
// prompt (exact_joint's reference for the logits processors).
using ProcessLogits = std::function<void(float* logits, const std::vector<int32_t>& output)>;

// The target's exact joint distribution of the first n tokens after `prompt` under `sp`
// (vocab^n cells, in row-major token order), by prefilling every prefix; each prefix's logits
// go through `process` first when given.
inline std::vector<double> exact_joint(const Model& target, const std::vector<int32_t>& prompt, const SamplingParams& sp,
                                       int n, DType kv_dtype = DType::F32, const ProcessLogits& process = nullptr) {
  const ModelConfig& c = target.config();
  KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, kv_dtype, 1 << 12);
  Forward fwd(target, kv);
  Sampler sampler;
  std::vector<float> logits(size_t(c.vocab_size)), p(size_t(c.vocab_size));
  std::vector<double> out;
  std::vector<int32_t> output;
  std::function<void(double, int)> rec = [&](double mass, int depth) {
    if (depth == n) {
      out.push_back(mass);
      return;
    }
    std::vector<int32_t> ctx = prompt;
    ctx.insert(ctx.end(), output.begin(), output.end());
    const int seq = kv.create_sequence();
    const float* row = prefill(fwd, seq, ctx, 512);
    std::copy(row, row + c.vocab_size, logits.begin());
    kv.free_sequence(seq);
    if (process) process(logits.data(), output);
    sampler.dense(logits.data(), c.vocab_size, sp, p.data());
    const std::vector<float> probs = p;
    for (int v = 0; v < c.vocab_size; ++v) {
      if (probs[size_t(v)] == 0.f) {  // never sampled: every cell under it holds 0
        out.insert(out.end(), size_t(std::pow(double(c.vocab_size), n - depth - 1)), 0.0);
        continue;
      }
      output.push_back(v);
      rec(mass * probs[size_t(v)], depth + 1);
      output.pop_back();
    }
  };
  rec(1.0, 0);
  return out;
}

}  // namespace dspark::testing
