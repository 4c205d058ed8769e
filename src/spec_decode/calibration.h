// Confidence calibration for DSpark: Sequential Temperature Scaling (per-position temperatures
// chosen left to right, each minimising the ECE of the cumulative product), with ECE and AUROC.
#pragma once

#include <vector>

namespace dspark {

// One verification round as calibration sees it.
struct RoundRecord {
  std::vector<float> logits;  // raw confidence logits s_1..s_l of the verified drafts
  int accepted = 0;           // drafts accepted (0..l)
};

struct CalibrationReport {
  std::vector<float> temperatures;  // T_1..T_K
  std::vector<double> ece_before, ece_after;  // per position, of the cumulative product
  std::vector<int> samples;                   // rounds that verified position k
  double auroc_before = 0, auroc_after = 0;   // pooled over positions
};

// Expected calibration error with `bins` equal-width bins of the predictions.
double expected_calibration_error(const std::vector<double>& pred, const std::vector<int>& label, int bins = 20);
// Area under the ROC curve (ties count half).
double auroc(const std::vector<double>& pred, const std::vector<int>& label);

// Fits T_1..T_K by STS over a log-spaced grid of `grid` values in [0.125, 8]. Position k
// uses the rounds that verified it; its label is 1 when drafts 1..k were all accepted.
CalibrationReport fit_sequential_temperature_scaling(const std::vector<RoundRecord>& rounds, int K, int grid = 49);

}  // namespace dspark
