#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/ops.h"

namespace dspark {
namespace {

TEST(Ops, RmsNormMatchesFormula) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (int dim : {8, 16, 64, 72, 1024, 13}) {
    const int rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * dim)), w(static_cast<size_t>(dim)), y(x.size());
    for (auto& v : x) v = nd(rng) * 3;
    for (auto& v : w) v = 1 + 0.1f * nd(rng);
    rmsnorm(x.data(), dim, w.data(), y.data(), dim, rows, dim, 1e-6f);
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
      double inv = 1 / std::sqrt(ss / dim + 1e-6);
      for (int i = 0; i < dim; ++i)
        ASSERT_NEAR(y[size_t(r * dim + i)], x[size_t(r * dim + i)] * inv * w[size_t(i)], 1e-5) << dim;
    }
  }
}

TEST(Ops, SiluMulMatchesFormula) {
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  const int inter = 37, rows = 4;
  std::vector<float> gu(size_t(rows * 2 * inter)), out(size_t(rows * inter));
  for (auto& v : gu) v = nd(rng) * 6;
  gu[0] = -100.f;  // exp overflow territory
  gu[1] = 90.f;
  silu_mul(gu.data(), 2 * inter, out.data(), inter, rows, inter);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < inter; ++i) {
      double g = gu[size_t(r * 2 * inter + i)], u = gu[size_t(r * 2 * inter + inter + i)];
      double want = g / (1 + std::exp(-g)) * u;
      ASSERT_NEAR(out[size_t(r * inter + i)], want, 1e-5 * (1 + std::abs(want)));
    }
}

TEST(Ops, RopeRotatesPairsHalfApart) {
  const int hd = 8, heads = 2;
  std::vector<float> x(size_t(hd * heads));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i + 1);
  std::vector<float> c(hd / 2), s(hd / 2);
  for (int i = 0; i < hd / 2; ++i) {
    c[size_t(i)] = std::cos(0.3f * float(i + 1));
    s[size_t(i)] = std::sin(0.3f * float(i + 1));
  }
  auto orig = x;
  rope(x.data(), 0, 1, heads, hd, c.data(), s.data());
  for (int h = 0; h < heads; ++h)
    for (int i = 0; i < hd / 2; ++i) {
      float a = orig[size_t(h * hd + i)], b = orig[size_t(h * hd + i + hd / 2)];
      EXPECT_NEAR(x[size_t(h * hd + i)], a * c[size_t(i)] - b * s[size_t(i)], 1e-5);
      EXPECT_NEAR(x[size_t(h * hd + i + hd / 2)], b * c[size_t(i)] + a * s[size_t(i)], 1e-5);
    }
}

// The plain rule argmax() must reproduce on every CPU path.
int argmax_rule(const std::vector<float>& x) {
  int best = 0;
  for (int i = 1; i < int(x.size()); ++i)
    if (x[size_t(i)] > x[size_t(best)]) best = i;
  return best;
}

TEST(Ops, ArgmaxMatchesTheFirstLargestRule) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const float nan = std::nanf(""), inf = INFINITY;
  int cases = 0;
  for (int n : {1, 7, 8, 15, 16, 17, 31, 33, 100, 8192, 8195}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      // Few distinct values in some trials, so ties are common.
      for (auto& v : x) v = trial % 4 == 0 ? float(int(nd(rng) * 2)) : nd(rng);
      std::uniform_int_distribution<int> at(0, n - 1);
      if (trial % 5 == 1) x[size_t(at(rng))] = nan;
      if (trial % 5 == 2) std::fill(x.begin(), x.end(), -inf);
      if (trial % 5 == 3) x[0] = nan;
      if (trial % 7 == 4) x[size_t(n - 1)] = inf;
      if (trial % 9 == 5) {  // the maximum twice, at random places
        const float top = 1e6f;
        x[size_t(at(rng))] = top;
        x[size_t(at(rng))] = top;
      }
      if (trial % 11 == 6) x[size_t(at(rng))] = -0.f, x[size_t(at(rng))] = 0.f;
      ASSERT_EQ(argmax(x.data(), n), argmax_rule(x)) << "n " << n << " trial " << trial;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 11 * 40);
}

}  // namespace
}  // namespace dspark
