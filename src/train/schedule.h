// Learning-rate schedule: linear warmup, then cosine decay to min_ratio * peak.
#pragma once

#include <cmath>
#include <cstdint>

namespace dspark::train {

struct LrSchedule {
  double peak = 3e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_ratio = 0.1;

  // Learning rate of optimizer step `step` (0-based).
  double at(int64_t step) const {
    if (warmup_steps > 0 && step < warmup_steps) return peak * double(step + 1) / double(warmup_steps);
    const double span = double(std::max<int64_t>(1, total_steps - warmup_steps));
    const double t = std::min(1.0, double(step - warmup_steps) / span);
    return peak * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + std::cos(M_PI * t)));
  }
};

}  // namespace dspark::train
