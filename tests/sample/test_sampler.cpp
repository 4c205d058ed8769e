#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "core/error.h"
#include "sample/sampler.h"

namespace dspark {
namespace {

std::vector<double> softmax(const std::vector<float>& logits, double t) {
  double mx = -1e300;
  for (float l : logits) mx = std::max(mx, double(l));
  std::vector<double> p;
  double s = 0;
  for (float l : logits) s += p.emplace_back(std::exp((l - mx) / t));
  for (double& v : p) v /= s;
  return p;
}

const std::vector<float> kLogits = {2.0f, 1.0f, 0.5f, 3.0f, -1.0f, 0.0f, 2.5f, 1.5f};

TEST(Sampler, GreedyIsArgmax) {
  Sampler s;
  Rng rng(1);
  SamplingParams p;
  EXPECT_EQ(s.sample(kLogits.data(), int(kLogits.size()), p, rng), 3);
}

TEST(Sampler, TemperatureDistributionMatchesSoftmax) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0.7f;
  auto want = softmax(kLogits, 0.7);
  TokenDist d;
  s.distribution(kLogits.data(), int(kLogits.size()), p, d);
  ASSERT_EQ(d.ids.size(), kLogits.size());
  for (size_t i = 0; i < d.ids.size(); ++i) EXPECT_NEAR(d.probs[i], want[size_t(d.ids[i])], 1e-6);
  // Empirical frequencies: chi-square against the exact distribution.
  Rng rng(42);
  const int n = 200000;
  std::vector<int> counts(kLogits.size());
  for (int i = 0; i < n; ++i) counts[size_t(s.sample(kLogits.data(), int(kLogits.size()), p, rng))]++;
  double chi2 = 0;
  for (size_t i = 0; i < counts.size(); ++i) chi2 += std::pow(counts[i] - n * want[i], 2) / (n * want[i]);
  EXPECT_LT(chi2, 24.3) << "chi-square with 7 degrees of freedom, p < 0.001";
}

TEST(Sampler, DenseRowIsTheDistributionOnEveryPath) {
  // dense() writes the no-cut case straight into the row; every path must give exactly the values
  // distribution() keeps (the verifier sees dense rows, plain decoding samples the sparse form).
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 3.f);
  const int V = 1003;  // not a multiple of the vector width
  std::vector<float> logits(static_cast<size_t>(V)), row(static_cast<size_t>(V));
  for (auto& v : logits) v = nd(rng);
  logits[17] = -INFINITY;  // a banned token
  std::vector<SamplingParams> cases(7);
  cases[0].temperature = 1.f;
  cases[1].temperature = 0.7f, cases[1].min_p = 0.1f;
  cases[2].temperature = 1.3f, cases[2].top_k = 20;
  cases[3].temperature = 1.f, cases[3].top_p = 0.8f;
  cases[4].temperature = 0.7f, cases[4].top_k = 50, cases[4].top_p = 0.9f;
  cases[5].temperature = 2.f, cases[5].top_k = V;  // a top-k that cuts nothing
  // cases[6]: greedy
  Sampler s;
  for (size_t c = 0; c < cases.size(); ++c) {
    TokenDist d;
    s.distribution(logits.data(), V, cases[c], d);
    s.dense(logits.data(), V, cases[c], row.data());
    std::vector<float> want(static_cast<size_t>(V), 0.f);
    for (size_t i = 0; i < d.ids.size(); ++i) want[size_t(d.ids[i])] = d.probs[i];
    double mass = 0;
    for (int v = 0; v < V; ++v) {
      ASSERT_EQ(row[size_t(v)], want[size_t(v)]) << "case " << c << " token " << v;
      mass += row[size_t(v)];
    }
    EXPECT_NEAR(mass, 1.0, 1e-5) << c;
    EXPECT_EQ(row[17], 0.f) << c;
  }
  // The no-cut row against a double-precision softmax.
  const auto ref = softmax(logits, 1.0);
  s.dense(logits.data(), V, cases[0], row.data());
  for (int v = 0; v < V; ++v) ASSERT_NEAR(row[size_t(v)], ref[size_t(v)], 1e-6 * ref[size_t(v)] + 1e-12) << v;
}

TEST(Sampler, TopKKeepsKMostLikely) {
  Sampler s;
  SamplingParams p;
  p.temperature = 1.f;
  p.top_k = 3;
  TokenDist d;
  s.distribution(kLogits.data(), int(kLogits.size()), p, d);
  EXPECT_EQ(d.ids, (std::vector<int32_t>{3, 6, 0}));
  auto full = softmax(kLogits, 1.0);
  const double mass = full[3] + full[6] + full[0];
  EXPECT_NEAR(d.probs[0], full[3] / mass, 1e-6);
  EXPECT_NEAR(d.probs[2], full[0] / mass, 1e-6);
}

TEST(Sampler, TopPKeepsSmallestPrefixWithMass) {
  Sampler s;
  SamplingParams p;
  p.temperature = 1.f;
  auto full = softmax(kLogits, 1.0);  // order: 3, 6, 0, 7, 1, 2, 5, 4
  const std::vector<int32_t> order = {3, 6, 0, 7, 1, 2, 5, 4};
  for (float top_p : {0.1f, 0.5f, 0.8f, 0.95f, 0.999f}) {
    p.top_p = top_p;
    TokenDist d;
    s.distribution(kLogits.data(), int(kLogits.size()), p, d);
    size_t want = 0;
    double cum = 0;
    while (cum < top_p) cum += full[size_t(order[want++])];
    ASSERT_EQ(d.ids.size(), want) << top_p;
    for (size_t i = 0; i < want; ++i) EXPECT_EQ(d.ids[i], order[i]);
  }
}

TEST(Sampler, TopPOnLargeVocabulary) {
  // More candidates than the first sorted prefix (256) must be found when the mass is flat.
  std::vector<float> logits(5000, 0.f);
  Sampler s;
  SamplingParams p;
  p.temperature = 1.f;
  p.top_p = 0.5011f;  // 2505.5 tokens' worth of mass: the boundary is not a rounding question
  TokenDist d;
  s.distribution(logits.data(), int(logits.size()), p, d);
  EXPECT_EQ(d.ids.size(), 2506u);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  Sampler s;
  SamplingParams p;
  p.temperature = 1.f;
  p.min_p = 0.3f;
  auto full = softmax(kLogits, 1.0);
  TokenDist d;
  s.distribution(kLogits.data(), int(kLogits.size()), p, d);
  for (size_t i = 0; i < kLogits.size(); ++i) {
    bool kept = d.prob_of(int32_t(i)) > 0;
    EXPECT_EQ(kept, full[i] >= 0.3 * full[3]) << i;
  }
}

TEST(Sampler, SeedsAreReproducibleAndDistinct) {
  SamplingParams p;
  p.temperature = 1.f;
  auto draw = [&](uint64_t seed) {
    Sampler s;
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(kLogits.data(), int(kLogits.size()), p, rng));
    return out;
  };
  EXPECT_EQ(draw(7), draw(7));
  EXPECT_NE(draw(7), draw(8));
}

TEST(Sampler, ValidateNamesTheField) {
  auto msg = [](SamplingParams p) {
    try {
      p.validate();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SamplingParams p;
  p.top_p = 0.f;
  EXPECT_NE(msg(p).find("top_p"), std::string::npos);
  p = {};
  p.temperature = -1.f;
  EXPECT_NE(msg(p).find("temperature"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(msg(p).find("top_k"), std::string::npos);
  p = {};
  p.min_p = 2.f;
  EXPECT_NE(msg(p).find("min_p"), std::string::npos);
}

}  // namespace
}  // namespace dspark
