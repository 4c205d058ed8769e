#include "runtime/metrics.h"

#include <algorithm>

namespace dspark {

EngineMetrics::PerDrafter& EngineMetrics::per_drafter(int version) {
  if (auto it = spec_by_drafter.find(version); it != spec_by_drafter.end()) return it->second;
  // A request still on a version older than every one kept counts nowhere per version (its
  // rounds are in the totals).
  if (spec_by_drafter.size() >= kMaxDrafterVersions && version < spec_by_drafter.begin()->first)
    return dropped_versions;
  PerDrafter& pd = spec_by_drafter[version];
  if (spec_by_drafter.size() > kMaxDrafterVersions) spec_by_drafter.erase(spec_by_drafter.begin());
  return pd;
}

void Histogram::observe(double v) {
  const size_t i = size_t(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin());
  ++counts[i];
  sum += v;
  ++count;
}

std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

using json = nlohmann::json;

json SpecMetrics::to_json() const {
  json acc = json::array(), ver = json::array();
  for (size_t i = 0; i < verified_at.size(); ++i) {
    ver.push_back(verified_at[i]);
    acc.push_back(verified_at[i] ? double(accepted_at[i]) / double(verified_at[i]) : 0.0);
  }
  return {{"rounds", rounds},
          {"drafted_tokens", drafted},
          {"proposed_tokens", proposed},
          {"accepted_tokens", accepted},
          {"mean_accepted_length", mean_accepted_length()},
          {"acceptance_rate", drafted ? double(accepted) / double(drafted) : 0.0},
          {"mean_verified_drafts", rounds ? double(drafted) / double(rounds) : 0.0},
          {"acceptance_per_position", acc},
          {"verified_per_position", ver},
          {"draft_seconds", draft_seconds},
          {"verify_seconds", verify_seconds},
          {"other_seconds", other_seconds}};
}

void SpecMetrics::merge(const SpecMetrics& o) {
  rounds += o.rounds;
  drafted += o.drafted;
  proposed += o.proposed;
  accepted += o.accepted;
  if (verified_at.size() < o.verified_at.size()) {
    verified_at.resize(o.verified_at.size());
    accepted_at.resize(o.accepted_at.size());
  }
  for (size_t i = 0; i < o.verified_at.size(); ++i) {
    verified_at[i] += o.verified_at[i];
    accepted_at[i] += o.accepted_at[i];
  }
  round_records.insert(round_records.end(), o.round_records.begin(), o.round_records.end());
  draft_seconds += o.draft_seconds;
  verify_seconds += o.verify_seconds;
  other_seconds += o.other_seconds;
}

}  // namespace dspark
