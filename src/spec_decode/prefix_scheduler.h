// DSpark's hardware-aware prefix scheduler (Algorithm 1): admit (request, position) pairs in
// descending prefix-survival a_{r,j} = prod_{i<=j} c_{r,i} while the expected throughput
// Theta = (sum_r 1 + sum_{j<=l_r} a_{r,j}) * SPS(B), B = sum_r (1 + l_r), keeps improving.
// The early stop at the first non-improvement is what keeps it lossless: the decision on
// draft k is made before anything that depends on x_k is looked at.
#pragma once

#include <vector>

#include "spec_decode/length_policy.h"

namespace dspark {

class PrefixScheduler : public VerifyLengthPolicy {
 public:
  // sps[B]: target steps per second for a batch of B tokens (index 0 unused); beyond the table
  // the step time grows linearly with the slope of its last two entries.
  explicit PrefixScheduler(std::vector<double> sps) : sps_(std::move(sps)) {}
  void choose(std::span<const Draft* const> drafts, std::span<int> lengths) override;

  // With learn_drafting_cost, a round's rate is 1 / (1 / sps[B] + d), d the running mean of the
  // drafting times observed so far (vLLM's budget divides by draft_ms + verify_ms the same way):
  // on a machine where drafting costs about a target step, ignoring it cuts blocks too short.
  void learn_drafting_cost(bool on) { learn_ = on; }
  void observe_drafting(double seconds) override;
  void set_other_tokens(int tokens) override { other_tokens_ = tokens; }
  // With a learned drafting cost (the "auto" curve): whether to draft is chosen from the
  // realized output rate (tokens per second, drafting included) of the recent steps of each kind
  // at about this many requests (buckets 1, 2-3, 4-7, ...): the faster kind runs, the other is
  // tried again every kProbeEvery steps so the choice follows load and acceptance. Only past
  // steps decide, so skipping keeps the output the target's.
  bool should_draft(int requests, int other_tokens) override;
  void observe_step(int requests, bool drafted, int tokens, double seconds, int decode_rows,
                    int other_rows) override;
  static constexpr int kProbeEvery = 16;
  double drafting_cost() const { return draft_s_; }

 protected:
  double sps(int batch_tokens) const;       // with the learned drafting time
  double step_sps(int batch_tokens) const;  // the target step alone
  // false only in the anticipating variant that tests use to show the bias.
  virtual bool early_stop() const { return true; }

 private:
  std::vector<double> sps_;
  bool learn_ = false;
  int other_tokens_ = 0;
  struct Rate {
    double tokens = 0, seconds = 0;  // decayed sums over the recent steps
    double tokens_per_s = 0;
    int observed = 0;
    int64_t last_step = 0;
  };
  std::vector<Rate> rates_;  // [bucket * 2 + drafted]
  int64_t steps_ = 0;
  double draft_s_ = 0;  // mean drafting seconds per round so far (exponentially weighted)
  int64_t observed_ = 0;
};

namespace testing {
// The retrospective global argmax over all prefixes (Algorithm 1 without the early stop).
// Because c_{k+1} depends on x_k, this lets x_k decide whether x_k is verified: biased.
class AnticipatingScheduler : public PrefixScheduler {
 public:
  using PrefixScheduler::PrefixScheduler;

 protected:
  bool early_stop() const override { return false; }
};
}  // namespace testing

}  // namespace dspark
