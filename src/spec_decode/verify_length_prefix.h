// DSpark's hardware-aware prefix length policy (Algorithm 1): admit (request, position) pairs in
// descending prefix-survival a_{r,j} = prod_{i<=j} c_{r,i} while the expected throughput
// Theta = (sum_r 1 + sum_{j<=l_r} a_{r,j}) * SPS(B), B = sum_r (1 + l_r), keeps improving.
// The early stop at the first non-improvement is what keeps it lossless: the decision on
// draft k is made before anything that depends on x_k is looked at.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "spec_decode/verify_length.h"

namespace dspark {

class PrefixLengthPolicy : public VerifyLengthPolicy {
 public:
  // sps[B]: target steps per second for a batch of B tokens (index 0 unused); beyond the table
  // the step time grows linearly with the slope of its last two entries.
  explicit PrefixLengthPolicy(std::vector<double> sps) : sps_(std::move(sps)) {}
  // Algorithm 1, l = 0 for every request included: with the round's drafting time d (already
  // spent when the lengths are chosen) a length-l round yields tau / (t(B) + d) tokens per
  // second, and the scan starts from all lengths 0 (R / (t(R) + d)), so when no first draft is
  // likely enough to pay for its row the round verifies nothing (a plain decoding step; the drafts
  // are dropped, which is lossless because only the confidences decided). The round's predicted
  // gain over a plain step without drafting, tau / (t(B) + d) against R / t(R), is what
  // should_draft() weighs.
  void choose(std::span<const Draft* const> drafts, std::span<int> lengths) override;

  // With learn_drafting_cost (make_verify_policy turns it on for every curve, loaded or
  // profiled) a round's time is t(B) + d(R), d(R) = R x the drafting seconds per request observed
  // so far (vLLM's budget divides by draft_ms + verify_ms the same way): on a machine where
  // drafting costs about a target step, ignoring it cuts blocks too short, and a batched round of
  // R requests costs about R single ones. The cost used is the mean of the middle half of the
  // last kCostWindow rounds (a cold first round does not count for long), rounded to kCostGrid of
  // t(1) and moved only when the mean leaves its cell by a quarter more (hysteresis), so that
  // timer noise does not flip lengths from round to round or run to run.
  void learn_drafting_cost(bool on) { learn_ = on; }
  void observe_drafting(double seconds, int requests) override;
  // The gates below are kept per context bucket as well (the requests' mean cached positions:
  // below 256, 256-511, 512-1023, ...): a plain step on a long prompt is slower and drafting
  // gains less there, so one prompt's rates must not judge another's.
  void set_contexts(std::span<const int> positions) override;
  // With learning on, plain steps also teach the step's cost beyond the target forward
  // (sampling, bookkeeping, delivering the outputs): o, the mean of a plain
  // step's seconds less t(rows), learned as the drafting cost is. Every step pays it, drafted or
  // not, so a round's time is t(B) + d + o and a plain step's t(R) + o; leaving it out overrates
  // plain steps against rounds that yield several tokens. Steps with other rows (prompt chunks)
  // teach nothing: they time mostly the prefill.
  void observe_step(int requests, bool drafted, int tokens, double seconds, int decode_rows,
                    int other_rows, double switching = 0) override;
  // With a learned drafting cost: whether this step drafts at all, at about this many requests
  // (each count up to 16, then 17-31, 32-63, ...) and context (set_contexts). Two judges, the
  // second once it can:
  // - predicted: it drafts while the recent rounds' predicted gain (choose(), a decayed mean) is
  //   at least 1 - kHysteresis;
  // - measured: tokens per second of the drafted steps against those of plain steps, both
  //   decayed means of what observe_step saw (at least kMeasuredMin of each). While drafting,
  //   every kExploreFirst-th step is plain until kMeasuredMin plain steps are seen, then every
  //   kExploreEvery-th (kExploreRarely-th while drafting gains kFarAhead or more, measured or,
  //   before that, predicted), so that what drafting is judged against stays measured. The
  //   prediction misses what the curve and the learned costs do not hold (on long prompts a round
  //   took more than predicted, and drafting lost while predicted to break even); the measurement
  //   holds everything.
  // Once drafting loses, steps are plain ones without drafting. Such a run of plain steps is
  // probed with one drafted round after kProbeFirst steps, then after twice as many each time
  // the probe still loses (at most kProbeMax), and at least as many as keep a losing probe's
  // cost within kProbeBudget of the throughput of the plain steps seen so far (at most
  // kProbeLongest, and at most kProbeGrowth times the last gap, so that one probe slowed by load
  // from elsewhere does not set the next 1,024 steps away): under load a probe can cost several
  // plain steps. A probe that gains at least 1 + kHysteresis (predicted, or measured: its own
  // tokens per second against the plain steps', its time taken without the switch, the
  // drafter's catch-up of the rows held through the plain run, which the probe's cost still
  // counts) resumes drafting, which the measured judge then weighs on the rounds from that probe
  // on. Drafting that a probe resumed and that loses again within kResumeTrial steps stops with
  // twice the gap before that probe, not kProbeFirst.
  // Once measured, a probe whose cut loses makes the next probes verify whole blocks until they
  // are measured as well; after that probes take the way that measures faster.
  // Once a load's rates are measured, its rounds either take Algorithm 1's lengths or verify
  // every draft, whichever measures faster (by 2%), the other tried one round in kExploreEvery
  // (kExploreFirst until it has kMeasuredMin rounds, kExploreRarely while far behind): where a
  // step's cost rises steeply past a few rows and then slowly (two cores, 9 to 16 rows, then
  // beyond), Algorithm 1's early stop halts in the steep part, while the whole block pays (4 users
  // on math: full blocks 1.07x plain, the cut rounds 0.78x). Which way is used depends on past
  // steps' timings only. A load first seen where drafting loses at the nearest lighter load seen
  // (same context) starts with plain steps and that load's probe spacing; while that lighter load
  // loses, this one probes at most every kProbeBehind steps (its probes would lose more). Only past
  // steps' confidences and timings decide, never the drafts of the step in question, so skipping
  // keeps the output the target's.
  bool should_draft(int requests) override;
  // One decoding request alone is one request's text: a gate of one request that stopped drafting
  // on an earlier request's rounds probes at the next request's first decoding step (a category
  // where drafting loses must not keep plain steps for the ones after it, one at a time).
  void request_admitted() override { ++admitted_; }
  static constexpr int kProbeFirst = 2;
  static constexpr int kProbeMax = 32;
  static constexpr double kProbeBudget = 0.005;
  static constexpr int kProbeLongest = 1024;
  static constexpr int kProbeGrowth = 4;
  static constexpr int kResumeTrial = 256;   // steps after which a resumption counts as lasting
  static constexpr int kProbeBehind = 4096;  // while the nearest lighter load seen loses too
  static constexpr double kGainDecay = 0.5;  // weight of the past in the decayed gain
  static constexpr double kHysteresis = 0.02;
  static constexpr int kMeasuredMin = 4;
  static constexpr int kExploreFirst = 8;
  static constexpr int kExploreEvery = 32;
  static constexpr int kExploreRarely = 128;  // while the measured gain is at least kFarAhead
  static constexpr double kFarAhead = 1.25;
  static constexpr double kRateDecay = 15.0 / 16;  // weight of the past in the measured rates
  static constexpr double kCostGrid = 1.0 / 32;    // drafting cost grid, in units of t(1)
  static constexpr int kCostWindow = 32;           // rounds (steps) a learned cost is taken over

  double drafting_cost() const { return draft_.mean; }       // per request: the trimmed mean
  double drafting_cost_used() const { return draft_.used; }  // the rounded one choose() uses
  double step_overhead_used() const { return over_.used; }   // o, rounded
  // The decayed predicted gain at about this many requests (0: nothing predicted yet).
  double predicted_gain(int requests) const;
  // The measured one: drafted steps' tokens per second over plain steps' (0: too few of either).
  double measured_gain(int requests) const;
  // Rounds that drafted and then verified nothing for any request (all lengths 0).
  int64_t empty_rounds() const { return empty_rounds_; }

 protected:
  double step_seconds(int batch_tokens) const;  // the target step alone
  // false only in the anticipating variant that tests use to show the bias.
  virtual bool early_stop() const { return true; }

 private:
  std::vector<double> sps_;
  bool learn_ = false;
  struct Gate {
    double gain = 0;    // decayed predicted gain of the drafted rounds (0: none yet)
    bool seen = false;  // used once (gate() sets it up on first use)
    bool drafting = true;
    int64_t last_step = 0;  // when the last run of plain steps began or was last probed
    int probe_every = kProbeFirst;
    int64_t admitted_seen = 0;  // admitted_ when this gate last stopped or probed
    int64_t resumed_at = -1;  // the step a probe resumed drafting at (-1: none since the stop)
    int resumed_gap = 0;      // the gap before that probe
    // Decayed sums of tokens and seconds of drafted and of plain steps, and how many of each.
    struct Rate {
      double tokens = 0, seconds = 0;
      int n = 0;
      void add(double t, double s) {
        tokens = kRateDecay * tokens + t;
        seconds = kRateDecay * seconds + s;
        ++n;
      }
      double per_second() const { return tokens / seconds; }
    };
    Rate drafted, plain;
    // Drafted steps without what they paid to switch from plain steps: whether drafting loses
    // here in itself, or only because a heavier load around it runs plain steps (3 requests
    // among 4: a request ends, its successor's prompt is not in yet). Only a load that loses in
    // itself holds the heavier ones back (behind_losing).
    Rate intrinsic;
    // Drafted steps that verified every draft instead of Algorithm 1's lengths, and whether
    // drafting uses them (the other way is tried one round in kExploreEvery, kExploreFirst until
    // measured, kExploreRarely while it measures below 1 / kFarAhead of the way in use).
    Rate full;
    bool full_blocks = false;
    int since_arm = 0;
    int since_plain = 0;  // drafted steps since the last plain one
    bool measured() const { return drafted.n >= kMeasuredMin && plain.n >= kMeasuredMin; }
    // Drafting's measured rate: the better of the two ways once both are measured.
    double drafted_rate() const {
      return full.n >= kMeasuredMin ? std::max(drafted.per_second(), full.per_second())
                                    : drafted.per_second();
    }
    double rate_gain() const { return drafted_rate() / plain.per_second(); }
  };
  std::vector<Gate> gates_;    // per bucket of requests and of context (gate_index)
  size_t context_bucket_ = 0;  // of the last set_contexts
  Gate& gate(int requests);
  const Gate* find_gate(int requests) const;  // nullptr: none yet
  // The gate of the nearest lighter load seen at this context (nullptr: none).
  const Gate* nearest_lighter(int requests) const;
  // Whether that gate holds this load back: it stopped drafting and, once measured, loses in
  // itself.
  bool behind_losing(int requests) const;
  // g's steps become plain ones from now, the first probe `probe_every` steps away.
  void stop_drafting(Gate& g, int probe_every);
  int64_t steps_ = 0;
  int64_t admitted_ = 0;  // requests admitted so far (request_admitted)
  // A learned cost: the samples of the last kCostWindow observations, their trimmed mean, and
  // that mean on the grid with hysteresis (the value used).
  struct Cost {
    std::array<double, kCostWindow> recent{};
    int64_t n = 0;
    double mean = 0, used = 0;
    void add(double x, double cell);
  };
  Cost draft_;  // drafting seconds per drafted request
  Cost over_;   // o
  int64_t empty_rounds_ = 0;
  bool last_full_ = false;  // the last round verified every draft (choose() chose full blocks)
};

namespace testing {
// The retrospective global argmax over all prefixes (Algorithm 1 without the early stop).
// Because c_{k+1} depends on x_k, this lets x_k decide whether x_k is verified: biased.
class AnticipatingLengthPolicy : public PrefixLengthPolicy {
 public:
  using PrefixLengthPolicy::PrefixLengthPolicy;

 protected:
  bool early_stop() const override { return false; }
};
}  // namespace testing

}  // namespace dspark
