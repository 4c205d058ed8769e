#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

// Head dimensions 8 (the scalar loop) and 64 and 128 (the AVX2 loop where the CPU has it), over
// rows with a stride: the same products and sums as the formula, bit for bit.
TEST(Ops, RopeRotatesPairsHalfApart) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int hd : {8, 64, 128}) {
    const int heads = 3, rows = 2, half = hd / 2, ld = heads * hd + 5;
    std::vector<float> x(size_t(rows * ld));
    for (auto& v : x) v = nd(rng);
    std::vector<float> c(size_t(rows * half)), s(c.size());
    for (size_t i = 0; i < c.size(); ++i) {
      c[i] = std::cos(0.3f * float(i + 1));
      s[i] = std::sin(0.3f * float(i + 1));
    }
    const auto orig = x;
    rope(x.data(), ld, rows, heads, hd, c.data(), s.data());
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          const size_t at = size_t(r * ld + h * hd + i);
          const float a = orig[at], b = orig[at + size_t(half)];
          const float ci = c[size_t(r * half + i)], si = s[size_t(r * half + i)];
          const float ac = a * ci, bs = b * si, bc = b * ci, as = a * si;
          ASSERT_EQ(x[at], ac - bs) << "hd " << hd << " row " << r << " head " << h << " i " << i;
          ASSERT_EQ(x[at + size_t(half)], bc + as) << "hd " << hd << " row " << r << " head " << h;
        }
    for (int i = heads * hd; i < ld; ++i)
      ASSERT_EQ(x[size_t(i)], orig[size_t(i)]) << "past the heads";
  }
}

// to_bf16 rounds as f32_to_bf16 does: to nearest even, NaNs kept NaN (quiet), infinities and
// subnormals kept; every length up to 40 (vector body and scalar tail).
TEST(Ops, ToBf16MatchesTheScalarRounding) {
  std::mt19937 rng(4);
  std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                0x7f800001u, 0xffffffffu, 0x00000001u, 0x807fffffu, 0x3f808000u,
                                0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x3f7fffffu};
  while (bits.size() < 4000) bits.push_back(uint32_t(rng()));
  std::vector<float> x(bits.size());
  for (size_t i = 0; i < x.size(); ++i) std::memcpy(&x[i], &bits[i], 4);
  std::vector<uint16_t> out(x.size());
  to_bf16(x.data(), out.data(), int(x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(out[i], f32_to_bf16(x[i])) << "bits 0x" << std::hex << bits[i];
  for (int n = 0; n <= 40; ++n) {
    std::vector<uint16_t> part(size_t(n) + 1, 0xabcd);
    to_bf16(x.data() + 3, part.data(), n);
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(part[size_t(i)], f32_to_bf16(x[size_t(i) + 3])) << "n " << n;
    ASSERT_EQ(part[size_t(n)], 0xabcd) << "wrote past n = " << n;
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

TEST(Ops, SoftmaxPiecesMatchTheirFormulas) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 4.f);
  for (int n : {1, 8, 13, 64, 8195}) {
    std::vector<float> x(static_cast<size_t>(n)), e(x.size());
    for (auto& v : x) v = nd(rng);
    if (n > 1) x[0] = -200.f;  // exp underflows to exactly 0
    float mx = -INFINITY;
    for (float v : x) mx = std::max(mx, v);
    ASSERT_EQ(max_value(x.data(), n), mx) << n;
    const double sum = exp_shifted(x.data(), n, mx, 0.5f, e.data());
    double want_sum = 0;
    for (int i = 0; i < n; ++i) {
      const double want = std::exp((double(x[size_t(i)]) - mx) * 0.5);
      want_sum += want;
      ASSERT_NEAR(e[size_t(i)], want, 1e-6 * want + 1e-30) << n << " " << i;
    }
    if (n > 1) {
      EXPECT_EQ(e[0], 0.f);
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << n;
    double want_unscaled = 0;
    for (float v : x) want_unscaled += std::exp(double(v) - mx);
    EXPECT_NEAR(exp_sum(x.data(), n, mx), want_unscaled, 1e-6 * want_unscaled) << n;
    const float t = x[size_t(n) / 3];
    int above = -1, want_above = 0;
    for (float v : x) want_above += v > t;
    EXPECT_EQ(max_value_and_count(x.data(), n, t, &above), mx) << n;
    EXPECT_EQ(above, want_above) << n;
    for (int from : {0, 1, n / 2, n - 1, n}) {
      int want = n;
      for (int i = from; i < n; ++i)
        if (x[size_t(i)] > t) {
          want = i;
          break;
        }
      ASSERT_EQ(next_greater(x.data(), n, from, t), want) << n << " from " << from;
    }
    const float floor = 0.05f;
    double kept = 0;
    for (float v : e) kept += v >= floor && v != 0.f ? v : 0.f;
    EXPECT_NEAR(kept_sum(e.data(), n, floor), kept, 1e-9 * (kept + 1)) << n;
    std::vector<float> scaled = e;
    kept_scale(scaled.data(), n, floor, 3.f);
    for (int i = 0; i < n; ++i) ASSERT_EQ(scaled[size_t(i)], e[size_t(i)] >= floor ? e[size_t(i)] * 3.f : 0.f) << n << " " << i;
  }
  const float nan = std::nanf("");
  std::vector<float> with_nan(20, 1.f);
  with_nan[3] = nan, with_nan[11] = 2.f, with_nan[19] = nan;
  EXPECT_EQ(max_value(with_nan.data(), 20), 2.f);
  int above = -1;
  EXPECT_EQ(max_value_and_count(with_nan.data(), 20, 1.f, &above), 2.f);
  EXPECT_EQ(above, 1);  // NaNs are never above
  EXPECT_EQ(next_greater(with_nan.data(), 20, 0, 1.f), 11);
  EXPECT_EQ(next_greater(with_nan.data(), 20, 12, 1.f), 20);
}

TEST(Ops, ResidualMassAndPickMatchTheScalarScan) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  for (int n : {5, 256, 257, 1000, 8195}) {
    std::vector<float> p(static_cast<size_t>(n)), q(p.size());
    for (auto& v : p) v = ud(rng) < 0.3f ? 0.f : ud(rng);  // zeros, as after top-k / min-p
    for (auto& v : q) v = ud(rng);
    for (const bool dense_q : {true, false}) {
      const int32_t onehot = dense_q ? -1 : n / 3;
      for (const double scale : {1.0, 0.37}) {
        auto term = [&](int v) {
          return std::max(scale * p[size_t(v)] - (dense_q ? double(q[size_t(v)]) : v == onehot ? 1.0 : 0.0), 0.0);
        };
        double mass = 0;
        for (int v = 0; v < n; ++v) mass += term(v);
        const double got = residual_mass(p.data(), dense_q ? q.data() : nullptr, onehot, scale, n);
        ASSERT_NEAR(got, mass, 1e-12 * mass) << n;
        for (int t = 0; t < 200; ++t) {
          const double target = std::uniform_real_distribution<double>(0, mass)(rng);
          int want = -1;
          double cum = 0;
          for (int v = 0; v < n && want < 0; ++v)
            if (term(v) > 0 && target < (cum += term(v))) want = v;
          ASSERT_EQ(residual_pick(p.data(), dense_q ? q.data() : nullptr, onehot, scale, n, target), want)
              << "n " << n << " target " << target;
        }
        // Past the end (rounding): the last token with a positive term.
        int last = n - 1;
        while (last >= 0 && term(last) <= 0) --last;
        EXPECT_EQ(residual_pick(p.data(), dense_q ? q.data() : nullptr, onehot, scale, n, mass * 2), last);
      }
    }
  }
}

}  // namespace
}  // namespace dspark
