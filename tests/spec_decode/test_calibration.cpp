#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "spec_decode/calibration.h"

namespace dspark {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST(Calibration, EceAndAurocOnKnownCases) {
  // Predictions equal to the label frequency in every bin: ECE 0.
  std::vector<double> pred;
  std::vector<int> label;
  for (int i = 0; i < 100; ++i) {
    pred.push_back(0.25);
    label.push_back(i < 25);
    pred.push_back(0.75);
    label.push_back(i < 75);
  }
  EXPECT_NEAR(expected_calibration_error(pred, label), 0.0, 1e-12);
  // Always saying 0.9 when half are right: ECE 0.4.
  std::vector<double> over(200, 0.9);
  std::vector<int> half(200);
  for (int i = 0; i < 200; ++i) half[size_t(i)] = i % 2;
  EXPECT_NEAR(expected_calibration_error(over, half), 0.4, 1e-12);
  // Perfect separation: AUROC 1; reversed: 0; all tied: 0.5.
  EXPECT_NEAR(auroc({0.1, 0.2, 0.8, 0.9}, {0, 0, 1, 1}), 1.0, 1e-12);
  EXPECT_NEAR(auroc({0.9, 0.8, 0.2, 0.1}, {0, 0, 1, 1}), 0.0, 1e-12);
  EXPECT_NEAR(auroc({0.5, 0.5, 0.5, 0.5}, {0, 1, 0, 1}), 0.5, 1e-12);
}

// A head that is over-confident by a factor of 2.5 in logit space: STS must find
// temperatures near 2.5 and cut the ECE of every position's cumulative product.
TEST(Calibration, StsFixesASyntheticOverconfidentHead) {
  const int K = 4, n = 20000;
  Rng rng(5);
  std::vector<RoundRecord> rounds;
  for (int r = 0; r < n; ++r) {
    RoundRecord rec;
    bool alive = true;
    for (int k = 0; k < K; ++k) {
      // True logit ~ N(0.8, 1.2^2) (Box-Muller), the head reports 2.5 times it.
      const double u1 = 1.0 - rng.uniform(), u2 = rng.uniform();
      const double z = 0.8 + 1.2 * std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
      rec.logits.push_back(float(2.5 * z));
      if (alive && rng.uniform() < sigmoid(z)) ++rec.accepted;
      else alive = false;
    }
    rounds.push_back(rec);
  }
  CalibrationReport rep = fit_sequential_temperature_scaling(rounds, K);
  for (int k = 0; k < K; ++k) {
    EXPECT_NEAR(rep.temperatures[size_t(k)], 2.5, 0.45) << "position " << k + 1;
    EXPECT_LT(rep.ece_after[size_t(k)], 0.5 * rep.ece_before[size_t(k)]) << "position " << k + 1;
    EXPECT_LT(rep.ece_after[size_t(k)], 0.02) << "position " << k + 1;
    EXPECT_EQ(rep.samples[size_t(k)], n);
  }
  EXPECT_GT(rep.auroc_after, 0.7);
}

}  // namespace
}  // namespace dspark
