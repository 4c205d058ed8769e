// The prefix length policy (Algorithm 1) and its cost model: zero-length rounds, skipping the
// drafter when its cost alone loses and probing back, the SPS curve from a profile (rounded so that
// two profiles give the same lengths) and from a `dspark bench step --sps-out` file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>
#include <utility>

#include "../error_of.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "fixtures.h"
#include "kernels/gemm.h"
#include "runtime/spec_generate.h"
#include "runtime/step_profile.h"
#include "spec_decode/spec_config.h"
#include "spec_decode/verify_length_prefix.h"

namespace dspark {
namespace {

using namespace dspark::testing;

// sps[B] for a step of a + b (B - 1) seconds, B = 1..n.
std::vector<double> line_sps(double a, double b, int n) {
  std::vector<double> s{0.0};
  for (int B = 1; B <= n; ++B) s.push_back(1.0 / (a + b * double(B - 1)));
  return s;
}

Draft draft_of(std::vector<float> conf) {
  Draft d;
  for (size_t i = 0; i < conf.size(); ++i) d.tokens.push_back(int32_t(i + 1));
  d.confidence = std::move(conf);
  return d;
}

int length_of(PrefixLengthPolicy& s, const Draft& d) {
  const Draft* dp = &d;
  int l = -1;
  s.choose(std::span<const Draft* const>(&dp, 1), std::span<int>(&l, 1));
  return l;
}

// The learned drafting cost: a round's fixed cost makes verifying more drafts worth it.
TEST(PrefixLengthPolicy, LearnedDraftingCostLengthensBlocks) {
  // Step time B seconds for B tokens; every conditional confidence 0.6.
  const std::vector<double> sps = {0.0, 1.0, 0.5, 1.0 / 3, 0.25, 0.2};
  const Draft d = draft_of({0.6f, 0.6f, 0.6f, 0.6f});
  PrefixLengthPolicy fixed(sps);
  fixed.observe_drafting(10.0, 1);  // ignored unless learning is on
  // Theta: 1 / 1 at l = 0 beats 1.6 / 2 at l = 1.
  EXPECT_EQ(length_of(fixed, d), 0);
  PrefixLengthPolicy learning(sps);
  learning.learn_drafting_cost(true);
  EXPECT_EQ(length_of(learning, d), 0) << "nothing observed yet: the curve alone";
  learning.observe_drafting(5.0, 1);
  learning.observe_drafting(15.0, 1);
  EXPECT_DOUBLE_EQ(learning.drafting_cost(), 10.0);
  EXPECT_DOUBLE_EQ(learning.drafting_cost_used(), 10.0);
  // Theta = tau / (B + 10): 1/11, 1.6/12, 1.96/13, 2.176/14 (best), 2.3056/15.
  EXPECT_EQ(length_of(learning, d), 3);
}

// The drafting cost is learned per request: a batched round of R requests costs about R single
// ones, so a round's cost learned at one load is not charged to another.
TEST(PrefixLengthPolicy, DraftingCostIsPerRequest) {
  const std::vector<double> sps = {0.0, 1.0, 0.5, 1.0 / 3, 0.25, 0.2};  // B seconds for B tokens
  const Draft d = draft_of({0.6f, 0.6f, 0.6f, 0.6f});
  auto length_after = [&](double seconds, int requests) {
    PrefixLengthPolicy s(sps);
    s.learn_drafting_cost(true);
    s.observe_drafting(seconds, requests);
    return length_of(s, d);
  };
  // 8 requests in 80 s: 10 s for one, as in LearnedDraftingCostLengthensBlocks.
  EXPECT_EQ(length_after(80.0, 8), 3);
  // 8 requests in 10 s: 1.25 s for one. Theta = tau / (B + 1.25): 1/2.25, 1.6/3.25 (best),
  // 1.96/4.25.
  EXPECT_EQ(length_after(10.0, 8), 1);
  EXPECT_EQ(length_after(1.25, 1), 1);
}

// A cold first round (allocations, page faults) counts for little: the cost is the mean of the
// middle half of the last kCostWindow rounds. A running mean over these 16 rounds would be 7.2.
TEST(PrefixLengthPolicy, ASlowFirstRoundDoesNotLinger) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(100.0, 1);
  for (int i = 0; i < 15; ++i) s.observe_drafting(1.0, 1);
  EXPECT_DOUBLE_EQ(s.drafting_cost(), 1.0);
  EXPECT_DOUBLE_EQ(s.drafting_cost_used(), 1.0);
  // The same for o, a plain step's cost beyond the forward: a cold step of 50 s among 1.5 s ones
  // (t(1) = 1).
  s.observe_step(1, false, 1, 50.0, 1, 0);
  for (int i = 0; i < 15; ++i) s.observe_step(1, false, 1, 1.5, 1, 0);
  EXPECT_DOUBLE_EQ(s.step_overhead_used(), 0.5);
}

// The drafting cost in use sits on a grid of t(1) / 32 and moves only when the mean leaves its
// cell by a quarter more: a mean that wanders around a cell edge does not flip it.
TEST(PrefixLengthPolicy, DraftingCostHasHysteresis) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  const double cell = 1.0 / 32;
  s.observe_drafting(10.5 * cell, 1);  // the first: rounded, 10 or 11 cells
  const double first = s.drafting_cost_used();
  EXPECT_NEAR(std::fmod(first / cell + 1e-9, 1.0), 0.0, 1e-6) << "not on the grid: " << first;
  for (int i = 0; i < 200; ++i) {
    s.observe_drafting((i % 2 ? 10.2 : 10.8) * cell, 1);  // noise across the edge at 10.5
    EXPECT_EQ(s.drafting_cost_used(), first) << "flipped at round " << i;
  }
  for (int i = 0; i < 200; ++i) s.observe_drafting(14 * cell, 1);
  EXPECT_NEAR(s.drafting_cost_used(), 14 * cell, 1e-12) << "a real change must still move it";
}

// Zero drafts verified: confidences too low for their rows, with expensive drafting. Every draft
// verified: confident drafts on a nearly flat curve.
TEST(PrefixLengthPolicy, ZeroLengthForUnlikelyDraftsFullLengthForLikelyOnes) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(0.5, 1);
  // l = 0: 1 / 1.5; l = 1: 1.1 / 1.75 < 1 / 1.5.
  EXPECT_EQ(length_of(s, draft_of({0.1f, 0.9f, 0.9f, 0.9f})), 0);
  EXPECT_EQ(s.empty_rounds(), 1);
  EXPECT_LT(s.predicted_gain(1), 1.0)
      << "a round of drafting that verifies nothing must predict a loss";
  // The same confidences with a first draft that pays for its row (0.3 / 0.25 > 1 / 1.5).
  EXPECT_GE(length_of(s, draft_of({0.3f, 0.05f, 0.9f, 0.9f})), 1);

  PrefixLengthPolicy flat(line_sps(1.0, 0.01, 9));
  flat.learn_drafting_cost(true);
  flat.observe_drafting(0.1, 1);
  EXPECT_EQ(length_of(flat, draft_of({0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f, 0.95f})), 8);
  EXPECT_GT(flat.predicted_gain(1), 2.0);
  EXPECT_EQ(flat.empty_rounds(), 0);
}

// When rounds predict a loss the steps are plain ones without drafting; one drafted probe after
// kProbeFirst steps, then twice as long each time (at most kProbeMax); a probe that predicts a
// gain resumes drafting.
TEST(PrefixLengthPolicy, SkipsDraftingWhenItsCostLosesAndProbesBack) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(2.0, 1);  // drafting costs two target steps
  const Draft weak = draft_of({0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f});
  const Draft strong = draft_of({0.99f, 0.99f, 0.99f, 0.99f, 0.99f, 0.99f, 0.99f, 0.99f});
  std::vector<int> drafted_at;
  const int n = 2 + 4 + 8 + 16 + 3 * PrefixLengthPolicy::kProbeMax + 1;
  for (int i = 0; i < n; ++i)
    if (s.should_draft(1)) {
      drafted_at.push_back(i);
      length_of(s, weak);
    }
  ASSERT_GE(drafted_at.size(), 3u);
  EXPECT_EQ(drafted_at[0], 0) << "nothing predicted yet: draft";
  std::vector<int> gaps;
  for (size_t k = 1; k < drafted_at.size(); ++k) gaps.push_back(drafted_at[k] - drafted_at[k - 1]);
  const std::vector<int> want = {2, 4, 8, 16, 32, 32, 32};
  EXPECT_EQ(gaps, want) << "probes of drafting while it keeps losing";
  EXPECT_LT(s.predicted_gain(1), 1.0);
  // Another load (2 requests), first seen, starts where the nearest lighter one stands: drafting
  // loses at 1, so it loses at 2 as well; plain steps, probed as 1 request's are.
  EXPECT_FALSE(s.should_draft(2));
  // The text becomes predictable: the next probe finds it, and every step drafts again.
  int first = -1;
  for (int i = 0; i < PrefixLengthPolicy::kProbeMax + 1 && first < 0; ++i)
    if (s.should_draft(1)) {
      first = i;
      EXPECT_EQ(length_of(s, strong), 8);
    }
  ASSERT_GE(first, 0) << "never probed again";
  // Every step drafts again: the prediction is far ahead (kFarAhead), so the plain steps that
  // measure what drafting is judged against come only one in kExploreRarely.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(s.should_draft(1)) << "a winning probe must resume drafting (step " << i << ")";
    length_of(s, strong);
  }
  EXPECT_GT(s.predicted_gain(1), 1.5);
  // Without a measured drafting cost (learning off) Algorithm 1 alone decides: always draft.
  PrefixLengthPolicy fixed(line_sps(1.0, 0.25, 9));
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(fixed.should_draft(1));
    length_of(fixed, weak);
  }
}

// One step of one request as the engine runs it, timed: drafted steps (the policy choosing
// lengths for `d`) yield `tokens` in `seconds`, plain ones 1 token in 1 s. Whether it drafted.
bool timed_step(PrefixLengthPolicy& s, const Draft& d, int tokens, double seconds) {
  if (!s.should_draft(1)) {
    s.observe_step(1, false, 1, 1.0, 1, 0);
    return false;
  }
  const int l = length_of(s, d);
  s.observe_step(1, true, tokens, seconds, 1 + l, 0);
  return true;
}

// What the steps measure overrules a prediction: rounds predicted to win (by about 1.13: three
// drafts of confidence 0.7 against a step of 1 + 0.25 per token and drafting of 0.5) but measured
// at half the plain steps' tokens per second stop; the plain steps are probed, and once a probe
// measures a gain, drafting resumes; a probe that costs more waits longer. While drafting wins by
// far, plain steps come only one in kExploreRarely.
TEST(PrefixLengthPolicy, MeasuredRatesOverruleThePrediction) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(0.5, 1);
  const Draft strong = draft_of({0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f});
  auto step = [&](int tokens, double seconds) { return timed_step(s, strong, tokens, seconds); };
  int drafted = 0;
  for (int i = 0; i < 200; ++i) drafted += step(2, 4.0);  // 0.5 tokens/s against 1
  EXPECT_GT(s.predicted_gain(1), 1.05) << "the prediction must still say drafting wins";
  EXPECT_LT(s.predicted_gain(1), PrefixLengthPolicy::kFarAhead)
      << "(not by far: then plain steps are rare)";
  EXPECT_NEAR(s.measured_gain(1), 0.5, 0.05);
  EXPECT_LT(drafted, 40) << "drafting that measures a loss must stop (probes only)";
  // A probe loses 2 plain steps' tokens (2 in 4 s against 1 a second), so the next waits
  // 2 / kProbeBudget = 400 steps, not kProbeMax.
  const int gap = int(2 / PrefixLengthPolicy::kProbeBudget);
  int late = 0;
  for (int i = 0; i < 3 * gap; ++i) late += step(2, 4.0);
  EXPECT_LE(late, 3 + 1) << "probes must keep within kProbeBudget of the plain rate";
  EXPECT_GE(late, 2) << "but still come";
  // Drafting becomes fast (3 tokens/s): the next probe measures it and drafting resumes.
  int plain = 0;
  for (int i = 0; i < PrefixLengthPolicy::kProbeLongest + 1; ++i) step(6, 2.0);
  for (int i = 0; i < 2 * PrefixLengthPolicy::kExploreRarely; ++i) plain += !step(6, 2.0);
  EXPECT_GT(s.measured_gain(1), PrefixLengthPolicy::kFarAhead);
  EXPECT_LE(plain, 2 * 2)
      << "far ahead, plain steps only one in kExploreRarely (after the first kExploreEvery)";
  EXPECT_GE(plain, 1) << "the plain steps' rate must still be measured now and then";
}

// Before enough steps are measured, the prediction judges the probes; one that cost 4 plain steps
// (1 token in 5 s against 1 a second) still spaces the next by 4 / kProbeBudget = 800 steps.
TEST(PrefixLengthPolicy, CostlyProbesWaitLongerBeforeTheRatesAreMeasured) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(2.0, 1);  // the prediction says drafting loses
  const Draft weak = draft_of({0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f});
  int drafted = 0;
  for (int i = 0; i < 200; ++i) drafted += timed_step(s, weak, 1, 5.0);
  EXPECT_EQ(s.measured_gain(1), 0.0) << "(too few drafted steps to be measured)";
  EXPECT_LE(drafted, 3) << "probes 2, 4, 8, 16, 32, 32, ... steps apart whatever they cost";
}

// Each context bucket has its own gate: drafting that loses on a long prompt (1,500 cached
// positions) stops there, and a short prompt still drafts.
TEST(PrefixLengthPolicy, GatesAreKeptPerContext) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(0.5, 1);
  const Draft d = draft_of({0.7f, 0.7f, 0.7f, 0.7f});
  const std::vector<int> long_prompt = {1500}, short_prompt = {100};
  auto step = [&](const std::vector<int>& ctx, int tokens, double seconds) {
    s.set_contexts(ctx);
    return timed_step(s, d, tokens, seconds);
  };
  int drafted_long = 0, drafted_short = 0;
  for (int i = 0; i < 200; ++i) drafted_long += step(long_prompt, 2, 4.0);
  for (int i = 0; i < 40; ++i) drafted_short += step(short_prompt, 4, 2.0);
  EXPECT_LT(drafted_long, 40) << "drafting must stop where it measures a loss";
  EXPECT_GE(drafted_short, 32) << "a short prompt's gate must not inherit the long one's loss";
  s.set_contexts(long_prompt);
  EXPECT_NEAR(s.measured_gain(1), 0.5, 0.05);
  s.set_contexts(short_prompt);
  EXPECT_NEAR(s.measured_gain(1), 2.0, 0.05);
}

// `steps` steps of R requests: plain ones yield R tokens a second, drafted ones (the policy
// choosing lengths for d) 3R tokens at drafted_rate times that, `switching` seconds of which
// were paid to switch from plain steps. How many drafted.
int run_load(PrefixLengthPolicy& s, const Draft& d, int R, double drafted_rate, int steps,
             double switching = 0) {
  const std::vector<const Draft*> drafts(size_t(R), &d);
  std::vector<int> lengths(size_t(R), 0);
  int drafted = 0;
  for (int i = 0; i < steps; ++i) {
    if (!s.should_draft(R)) {
      s.observe_step(R, false, R, 1.0, R, 0);
      continue;
    }
    ++drafted;
    s.choose(drafts, lengths);
    int rows = R;
    for (int l : lengths) rows += l;
    s.observe_step(R, true, 3 * R, 3.0 / drafted_rate, rows, 0, switching);
  }
  return drafted;
}

// Each count of requests up to 16 has its own gate: drafting that loses at 7 requests stops
// there, and 4 requests, where it wins, still draft (one gate for 4-7 let 4's gains draft at 7).
TEST(PrefixLengthPolicy, GatesAreKeptPerRequestCount) {
  // Predicted gains: about 1.18 at 7 requests, 1.35 at 4 (drafting free, rows 0.1 s each).
  PrefixLengthPolicy s(line_sps(1.0, 0.1, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(0.0, 1);
  const Draft d = draft_of({0.7f, 0.7f, 0.7f, 0.7f});
  auto run = [&](int R, double drafted_rate, int steps) {
    return run_load(s, d, R, drafted_rate, steps);
  };
  EXPECT_LT(run(7, 0.6, 300), 40) << "drafting that loses at 7 requests must stop";
  EXPECT_NEAR(s.measured_gain(7), 0.6, 0.05);
  EXPECT_GE(run(4, 1.5, 100), 90) << "4 requests must not inherit 7's loss";
  // Loads first seen start where the nearest lighter one seen stands: 8 requests plain (7 lose),
  // 5 drafting (4 win).
  EXPECT_FALSE(s.should_draft(8));
  EXPECT_TRUE(s.should_draft(5));
}

// Behind a lighter load that loses, a heavier one probes only every kProbeBehind steps: its
// probes would lose more, and the lighter gate's own probes find when drafting pays again. At the
// frontier (the nearest lighter load drafts) it probes as often as its probes' cost allows.
TEST(PrefixLengthPolicy, HeavierLoadsBehindALosingOneProbeRarely) {
  const Draft d = draft_of({0.7f, 0.7f, 0.7f, 0.7f});
  // Drafted steps at 0.6 of the plain rate lose 2 plain steps each: probes 400 steps apart. (4
  // requests are predicted to win by far, so their plain steps are measured only after 512.)
  const int steps = 3 * PrefixLengthPolicy::kProbeBehind / 4;
  auto probes_at_8 = [&](double rate_at_4) {
    PrefixLengthPolicy s(line_sps(1.0, 0.1, 9));
    s.learn_drafting_cost(true);
    s.observe_drafting(0.0, 1);
    run_load(s, d, 4, rate_at_4, 1000);
    return run_load(s, d, 8, 0.6, steps);
  };
  EXPECT_LE(probes_at_8(0.6), 1) << "4 requests lose: 8 must leave the probing to them";
  EXPECT_GE(probes_at_8(1.5), 3) << "4 requests draft: 8 is the frontier and probes";
  // Rarely is not never.
  PrefixLengthPolicy s(line_sps(1.0, 0.1, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(0.0, 1);
  run_load(s, d, 4, 0.6, 1000);
  EXPECT_GE(run_load(s, d, 8, 0.6, 2 * PrefixLengthPolicy::kProbeBehind + 1), 1);
}

// A gate stopped by a noisy moment resumes once drafting pays again, however long the plain run
// before a probe was: one request, plain steps 1 token a second, rounds 3 tokens in 2.4 s, each
// paying 0.007 s a row held through the plain steps before it (the drafter's catch-up, at most
// 341 rows, as the engine holds). During the noise rounds take 6 s, drafting stops and losing
// probes space the next by hundreds of steps. Judged with the catch-up, every later probe paid
// hundreds of rows and lost again (0.6 tokens a second), so the gate never drafted again.
TEST(PrefixLengthPolicy, AProbeIsJudgedWithoutTheCatchUpOfThePlainRun) {
  PrefixLengthPolicy s(line_sps(1.0, 0.2, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(0.2, 1);
  const Draft d = draft_of(std::vector<float>(8, 0.7f));
  int held = 0;  // rows held since the last drafted step
  auto run = [&](int steps, double round_seconds) {
    int drafted = 0;
    for (int i = 0; i < steps; ++i) {
      if (!s.should_draft(1)) {
        s.observe_step(1, false, 1, 1.0, 1, 0);
        held = std::min(held + 1, 341);
        continue;
      }
      ++drafted;
      const int l = length_of(s, d);
      const double catch_up = 0.007 * held;
      held = 0;
      s.observe_step(1, true, 3, round_seconds + catch_up, 1 + l, 0, catch_up);
    }
    return drafted;
  };
  EXPECT_GT(run(300, 2.4), 250) << "(drafting wins at first)";
  run(3 * PrefixLengthPolicy::kProbeLongest, 6.0);  // the noise: drafting stops, probes lose
  EXPECT_LT(run(100, 6.0), 3) << "(stopped)";
  run(2 * PrefixLengthPolicy::kProbeLongest, 2.4);  // quiet again: a probe must find it
  EXPECT_GT(run(1000, 2.4), 900) << "the gate must draft again once a probe measures the gain";
}

// One slow probe (a moment of load from elsewhere: 4 tokens in 20 s against plain steps' 1 a
// second) does not send the next probe 1,024 steps away: the gap grows at most kProbeGrowth times
// a probe, so drafting resumes within a few dozen steps once rounds are fast again.
TEST(PrefixLengthPolicy, OneSlowProbeDoesNotStopDraftingForLong) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(0.5, 1);
  const Draft d = draft_of({0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f});
  // Drafted steps yield `tokens` in `seconds`, plain ones 1 token in 1 s; how many drafted.
  auto run = [&](int steps, int tokens, double seconds) {
    int drafted = 0;
    for (int i = 0; i < steps; ++i) drafted += timed_step(s, d, tokens, seconds);
    return drafted;
  };
  run(200, 2, 4.0);                                    // losing rounds: measured, stopped
  run(PrefixLengthPolicy::kProbeLongest + 1, 4, 2.0);  // 2 tokens a second: a probe resumes
  EXPECT_GT(run(300, 4, 2.0), 250) << "(drafting, measured at 2x)";
  int guard = 0;  // slow rounds (0.5 tokens a second) until they measure a loss: drafting stops
  while (s.measured_gain(1) >= 1 - PrefixLengthPolicy::kHysteresis && ++guard < 1000)
    timed_step(s, d, 4, 8.0);
  ASSERT_LT(guard, 1000) << "(drafting must stop on slow rounds)";
  int probes = 0;  // plain steps, then one probe, slowed
  for (guard = 0; probes < 1 && guard < 100; ++guard) probes += timed_step(s, d, 4, 20.0);
  ASSERT_EQ(probes, 1) << "(one slow probe)";
  EXPECT_GT(run(100, 4, 2.0), 50) << "drafting must resume within the next probes";
}

// Where drafting loses by a little, a lucky round can still win a probe. Each resumption then
// loses until the measured rates stop it again; one that loses within kResumeTrial steps waits
// twice as long before the next probe, so such resumptions thin out. Here rounds yield 3 tokens in
// 4.4 s (0.68 a second) and one drafted step in three 6 tokens (1.36), against plain steps' 1.
TEST(PrefixLengthPolicy, ResumptionsThatLoseAgainBackOff) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  s.observe_drafting(0.5, 1);
  const Draft d = draft_of({0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f});
  int drafted = 0, late = 0;
  const int steps = 20000;
  for (int i = 0; i < steps; ++i) {
    const bool lucky = drafted % 3 == 0;
    if (timed_step(s, d, lucky ? 6 : 3, 4.4)) {
      ++drafted;
      late += i >= steps / 2;
    }
  }
  EXPECT_LT(s.measured_gain(1), 1.0) << "(drafting loses on the whole)";
  EXPECT_LT(late, steps / 2 / 50) << "resumptions must thin out: drafted steps in the second half";
}

// One decoding request alone: a request after one whose rounds lost (a category where drafting
// loses, then one where it wins) gets a probe at its first decoding step, not after the gap the
// earlier request's losing probes left. Two requests at a time get no such probe.
TEST(PrefixLengthPolicy, ANewRequestAloneIsProbedAtOnce) {
  auto after_new_request = [](int requests) {
    PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
    s.learn_drafting_cost(true);
    s.observe_drafting(0.5, 1);
    const Draft d = draft_of({0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f});
    s.request_admitted();
    run_load(s, d, requests, 0.3, 600);  // rounds at 0.3 of the plain rate: stopped, probes spaced
    s.request_admitted();
    return run_load(s, d, requests, 2.0, 20);  // rounds at twice the plain rate
  };
  EXPECT_GT(after_new_request(1), 10) << "the new request's first step probes and drafting resumes";
  EXPECT_EQ(after_new_request(2), 0) << "(two requests: the gap stands)";
}

// A lighter load that loses only by what its rounds pay to switch from plain steps (3 requests
// among 4, where the 4's steps are plain) does not hold the heavier one back: here 4 requests'
// drafted steps run at 0.6 of the plain rate, 2 s of their 5 the switch, so in themselves at 1.0.
TEST(PrefixLengthPolicy, ALoadLosingOnlyBySwitchingHoldsNoneBack) {
  const Draft d = draft_of({0.7f, 0.7f, 0.7f, 0.7f});
  auto probes_at_8 = [&](double switching) {
    PrefixLengthPolicy s(line_sps(1.0, 0.1, 9));
    s.learn_drafting_cost(true);
    s.observe_drafting(0.0, 1);
    run_load(s, d, 4, 0.6, 1000, switching);
    return run_load(s, d, 8, 0.6, 3 * PrefixLengthPolicy::kProbeBehind / 4);
  };
  EXPECT_LE(probes_at_8(0.0), 1) << "4 requests lose in themselves: 8 leaves the probing to them";
  EXPECT_GE(probes_at_8(2.0), 3) << "4 requests lose by switching only: 8 probes on its own";
}

// Where the whole block measures faster than Algorithm 1's cut (the curve says rows are dear, the
// machine says they are not), rounds verify every draft; where it measures slower they keep the
// cut, the whole block tried one round in kExploreEvery.
TEST(PrefixLengthPolicy, VerifiesWholeBlocksWhereTheyMeasureFaster) {
  const Draft d = draft_of(std::vector<float>(8, 0.7f));
  auto run = [&](const std::function<int(int)>& tokens_of,
                 const std::function<double(int)>& seconds_of) {
    // Rows 0.5 s each by the curve, drafting 0.1 s: Algorithm 1 verifies one draft of the eight.
    PrefixLengthPolicy s(line_sps(1.0, 0.5, 9));
    s.learn_drafting_cost(true);
    s.observe_drafting(0.1, 1);
    int whole = 0, rounds = 0;
    for (int i = 0; i < 600; ++i) {
      if (!s.should_draft(1)) {
        s.observe_step(1, false, 1, 1.0, 1, 0);  // a token a second
        continue;
      }
      const int l = length_of(s, d);
      s.observe_step(1, true, tokens_of(l), seconds_of(l), 1 + l, 0);
      if (i >= 300) {
        ++rounds;
        whole += l == 8;
      }
    }
    return std::pair{whole, rounds};
  };
  // Rows cost nothing here and every draft is accepted: 9 tokens in 1.5 s against the cut's 2.
  const auto [w1, n1] = run([](int l) { return 1 + l; }, [](int) { return 1.5; });
  EXPECT_GT(n1, 200);
  EXPECT_GT(w1, n1 * 9 / 10) << "whole blocks measure 4.5x faster: rounds must take them";
  // Rows cost what the curve says and only two drafts survive: 3 tokens in 5 s, the cut's 2 in 1.5.
  const auto [w2, n2] =
      run([](int l) { return 1 + std::min(l, 2); }, [](int l) { return 1.0 + 0.5 * l; });
  EXPECT_GT(n2, 200);
  EXPECT_LE(w2, n2 / PrefixLengthPolicy::kExploreEvery + 1) << "the cut measures faster: keep it";
  EXPECT_GE(w2, 1) << "the whole block must still be tried now and then";
}

// One request, 2 * half steps against a policy on line_sps(1.0, 0.5, 9) that learned a drafting
// cost of 0.1 s; a round of length l yields outcome(l) = {tokens, seconds}, a plain step 1 token in
// 1 s. Over the last `half` steps: rounds with whole blocks, steps and tokens per second.
struct SecondHalf {
  int whole = 0, steps = 0;
  double rate = 0;
};
SecondHalf run_one_request(PrefixLengthPolicy& s, const Draft& d, int half,
                           const std::function<std::pair<int, double>(int)>& outcome) {
  s.learn_drafting_cost(true);
  s.observe_drafting(0.1, 1);
  SecondHalf h;
  double tokens = 0, seconds = 0;
  for (int i = 0; i < 2 * half; ++i) {
    int t = 1;
    double sec = 1.0;
    if (s.should_draft(1)) {
      const int l = length_of(s, d);
      std::tie(t, sec) = outcome(l);
      s.observe_step(1, true, t, sec, 1 + l, 0);
      if (i >= half) h.whole += l == 8;
    } else {
      s.observe_step(1, false, t, sec, 1, 0);
    }
    if (i >= half) {
      ++h.steps;
      tokens += t;
      seconds += sec;
    }
  }
  h.rate = tokens / seconds;
  return h;
}

// Where the cut measures a loss, whole blocks are measured before drafting stops: here the cut
// (one draft) yields 2 tokens in 2.5 s against plain steps' 1 a second, and whole blocks 9 tokens
// in 5 s. A gate that stopped on the cut met whole blocks only now and then in a probe, and kept
// cutting once a probe resumed drafting.
TEST(PrefixLengthPolicy, ALosingCutTriesWholeBlocksBeforeDraftingStops) {
  PrefixLengthPolicy s(line_sps(1.0, 0.5, 9));
  const SecondHalf h = run_one_request(s, draft_of(std::vector<float>(8, 0.7f)), 300, [](int l) {
    return l == 8 ? std::pair{9, 5.0} : std::pair{1 + std::min(l, 1), 2.5};
  });
  EXPECT_GT(h.whole, 40) << "whole blocks (1.8 tokens a second) must carry the rounds";
  EXPECT_GT(h.rate, 1.5) << "against 1 for plain steps and 0.8 for the cut";
  EXPECT_EQ(h.steps, 300);
}

// A gate stopped on the prediction probes with whole blocks once its cut probes measure a loss:
// here the confidences are low (0.3), so Algorithm 1 verifies nothing and predicts a loss for
// whole blocks too, but every draft survives: whole blocks yield 9 tokens in 5 s against plain
// steps' 1 a second. Probing with the cut alone, the gate never found them.
TEST(PrefixLengthPolicy, AStoppedGateProbesWithWholeBlocksOnceTheCutLoses) {
  PrefixLengthPolicy s(line_sps(1.0, 0.5, 9));
  const SecondHalf h = run_one_request(s, draft_of(std::vector<float>(8, 0.3f)), 400, [](int l) {
    return std::pair{1 + l, 1.1 + 0.5 * l};
  });
  EXPECT_LT(s.predicted_gain(1), 1.0) << "(the prediction must say a loss here)";
  EXPECT_GT(h.whole, 40) << "whole blocks (1.8 tokens a second) must carry the rounds";
  EXPECT_GT(h.rate, 1.5) << "against 1 for plain steps";
  EXPECT_EQ(h.steps, 400);
}

// A plain step's cost beyond the forward (o) is charged to rounds too: without it plain steps
// look cheaper than they are against rounds that yield several tokens.
TEST(PrefixLengthPolicy, PlainStepOverheadCountsOnBothSides) {
  auto gain_with = [](double overhead) {
    PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
    s.learn_drafting_cost(true);
    s.observe_drafting(1.0, 1);
    for (int i = 0; i < 8; ++i) s.observe_step(1, false, 1, 1.0 + overhead, 1, 0);
    EXPECT_NEAR(s.step_overhead_used(), overhead, 1.0 / 64);
    length_of(s, draft_of({0.8f, 0.8f, 0.8f, 0.8f}));
    return s.predicted_gain(1);
  };
  // l = 4 both times (tau = 3.3616): o = 0: tau / (2 + 1) = 1.12 against 1; o = 1: tau / 4 = 0.84
  // against 1 / 2, a gain of 1.68.
  EXPECT_GT(gain_with(1.0), gain_with(0.0) + 0.3);
}

// Steps with prompt chunks measure mostly the prefill, which they pay drafted or not, so they
// judge nothing. Here drafted steps run at half the plain steps' rate, and one step in four carries
// a prompt that takes 20 s: counted, those steps would sink the plain rate (4 tokens in 23 s
// against 12 in 26 s) and make drafting look 2x ahead. With 15 requests, as in the server.
TEST(PrefixLengthPolicy, StepsWithPromptChunksJudgeNothing) {
  PrefixLengthPolicy s(line_sps(1.0, 0.25, 9));
  s.learn_drafting_cost(true);
  const int R = 15;
  s.observe_drafting(0.5, R);  // a round of R requests drafts in 0.5 s
  const Draft strong = draft_of({0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f, 0.7f});
  std::vector<const Draft*> drafts(R, &strong);
  std::vector<int> lengths(R);
  int drafted = 0;
  // Long enough for kMeasuredMin probes without prompts, kProbeLongest apart at most.
  for (int i = 0; i < 6 * PrefixLengthPolicy::kProbeLongest; ++i) {
    const int prompt_rows = i % 4 == 3 ? 300 : 0;
    const double prefill = prompt_rows ? 20.0 : 0.0;
    if (!s.should_draft(R)) {
      s.observe_step(R, false, R, 1.0 + prefill, R, prompt_rows);
      continue;
    }
    ++drafted;
    s.choose(drafts, lengths);
    int rows = R;
    for (int l : lengths) rows += l;
    s.observe_step(R, true, 3 * R, 6.0 + prefill, rows, prompt_rows);  // 7.5 tokens/s against 15
  }
  EXPECT_NEAR(s.measured_gain(R), 0.5, 0.05);
  EXPECT_LT(drafted, 60) << "drafting that loses on the steps without prompts must stop";
}

// ---------------------------------------------------------------- the SPS curve

// Synthetic profile points: one sequence of 1..K+1 tokens with step time a (1 + rho (B - 1)),
// every sample jittered by +-`jitter` and with probability `spike` slowed by half again (another
// process taking the core).
std::vector<StepPoint> noisy_points(int K, double a, double rho, double jitter, double spike,
                                    uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1), v(0, 1);
  std::vector<StepPoint> pts;
  for (int T = 1; T <= K + 1; ++T) {
    StepPoint p{256, 1, T, 0, {}};
    for (int i = 0; i < kSpsPasses; ++i) {
      double t = a * (1 + rho * (T - 1)) * (1 + jitter * u(g));
      if (v(g) < spike) t *= 1.5;
      p.samples.push_back(t);
    }
    pts.push_back(p);
  }
  return pts;
}

// The lengths a curve chooses for one request, over confidence vectors that sweep every
// decision threshold finely: constant, decreasing, and one weak position.
std::vector<int> lengths_for(const std::vector<double>& sps, int K) {
  std::vector<int> out;
  PrefixLengthPolicy s(sps);
  for (int i = 1; i < 1000; ++i) {
    const float c = float(i) / 1000;
    std::vector<float> flat(size_t(K), c), falling(size_t(K), 0.0f), dip(size_t(K), 0.95f);
    for (int k = 0; k < K; ++k) falling[size_t(k)] = c * std::pow(0.97f, float(k));
    dip[size_t(K / 2)] = c;
    for (const auto& conf : {flat, falling, dip}) out.push_back(length_of(s, draft_of(conf)));
  }
  return out;
}

// The old fit: each point's median, a least-squares line, nothing rounded.
std::vector<double> unrounded_curve(const std::vector<StepPoint>& pts) {
  double n = 0, sb = 0, st = 0, sbb = 0, sbt = 0;
  for (const StepPoint& p : pts) {
    std::vector<double> v = p.samples;
    std::sort(v.begin(), v.end());
    const double b = p.tokens_per_seq, t = v[v.size() / 2];
    n += 1, sb += b, st += t, sbb += b * b, sbt += b * t;
  }
  const double slope = std::max(0.0, (n * sbt - sb * st) / (n * sbb - sb * sb)),
               icpt = (st - slope * sb) / n;
  std::vector<double> sps{0.0};
  for (const StepPoint& p : pts) sps.push_back(1.0 / (icpt + slope * p.tokens_per_seq));
  return sps;
}

// Two profiles of one machine, with timer jitter and bursts of other load, give one curve and so
// the same lengths; the old unrounded median fit of the same samples gives lengths that differ,
// and so does a profile far noisier than the rounding absorbs (the comparison can fail).
TEST(SpsCurve, TwoNoisyProfilesGiveTheSameLengths) {
  const int K = 8;
  // rho on a cell's centre (13/64): jitter of 3% moves the estimate by well under half a cell.
  const double rho = 13.0 / 64;
  const auto p1 = noisy_points(K, 1.7e-3, rho, 0.03, 0.15, 1),
             p2 = noisy_points(K, 1.7e-3, rho, 0.03, 0.15, 2);
  const auto c1 = sps_curve_from_profile(p1, {}, K, K + 1),
             c2 = sps_curve_from_profile(p2, {}, K, K + 1);
  ASSERT_EQ(c1.size(), size_t(K + 2));
  for (int B = 2; B <= K + 1; ++B) {
    EXPECT_NEAR(c1[1] / c1[size_t(B)], 1 + rho * (B - 1), 1e-9)
        << "B = " << B;  // the slope recovered
    EXPECT_NEAR(c2[1] / c2[size_t(B)], 1 + rho * (B - 1), 1e-9) << "B = " << B;
  }
  EXPECT_EQ(lengths_for(c1, K), lengths_for(c2, K));
  EXPECT_NE(lengths_for(unrounded_curve(p1), K), lengths_for(unrounded_curve(p2), K))
      << "the old fit should be sensitive to this noise (else this test shows nothing)";
  const auto n1 = noisy_points(K, 1.7e-3, rho, 0.6, 0.3, 3),
             n2 = noisy_points(K, 1.7e-3, rho, 0.6, 0.3, 4);
  EXPECT_NE(lengths_for(sps_curve_from_profile(n1, {}, K, K + 1), K),
            lengths_for(sps_curve_from_profile(n2, {}, K, K + 1), K))
      << "60% jitter should defeat the rounding (else the comparison cannot fail)";
}

// A target of the demo's width (steps of about a millisecond on two AVX2 cores: long enough that
// the thread pool's jitter does not dominate the profile).
std::unique_ptr<Model> small_target() {
  ModelConfig c = tiny_target(4096);
  c.hidden_size = 512;
  c.intermediate_size = 1408;
  c.num_layers = 4;
  return Model::build(c, *random_source(5, 0.1f), LoadOptions{DType::F32});
}

// Real profiles of one model, back to back: valid curves whose relative slope is on the grid
// (so that equal estimates give equal tables). How close the two slopes are is printed, not
// asserted: on a quiet machine they share a cell or neighbour one, but another process busy on
// the two cores changes the real curve (a slope of 0.11 became 0.31 here), which no rounding can
// hide. The noisy-profile test above is the deterministic check of the rounding.
TEST(SpsCurve, RealProfilesAreOnTheGrid) {
  const int K = 8;
  auto target = small_target();
  std::vector<std::vector<double>> curves;
  std::vector<double> rhos;
  for (int i = 0; i < 2; ++i) {
    curves.push_back(profile_sps_curve(*target, DType::F32, K, 4 * (K + 1)));
    const auto& c = curves.back();
    ASSERT_EQ(c.size(), size_t(4 * (K + 1) + 1));
    for (size_t B = 2; B < c.size(); ++B)
      EXPECT_LE(c[B], c[B - 1]) << "a longer step must not be faster";
    const double rho = (c[1] / c[2] - 1);
    EXPECT_NEAR(rho / kSpsSlopeGrid, std::round(rho / kSpsSlopeGrid), 1e-6)
        << "slope not rounded: " << rho;
    for (int B = 3; B <= K + 1; ++B)
      EXPECT_NEAR(c[1] / c[size_t(B)], 1 + rho * (B - 1), 1e-9) << "not one line at B = " << B;
    rhos.push_back(rho);
  }
  // Two curves of one slope are then the same line up to t(1), which the length choice divides
  // out; comparing their length tables directly is not a test of that: where two lengths tie
  // exactly, the last bit of a different t(1) breaks the tie (seen once on a loaded machine).
  std::printf("relative slopes of the two profiles: %.4f %.4f\n", rhos[0], rhos[1]);
}

// A curve written as `dspark bench step --sps-out` writes it is taken, with the drafting cost
// learned; a broken one is refused naming the file and the field.
TEST(SpsCurve, BenchStepFileLoadsAndABadOneIsNamed) {
  const int K = 4;
  auto target = small_target();
  const auto dir = temp_dir("sps_file");
  const std::string file = (dir / "sps.json").string();
  const std::vector<double> sps = profile_sps_curve(*target, DType::F32, K, 16);
  {
    // This machine's values, as bench step writes them (another machine's are refused:
    // BenchStep.SpsOutWritesTheCurveTheLengthPolicyLoads).
    nlohmann::json f = {{"model", "small"},
                        {"dtype", dtype_name(DType::F32)},
                        {"threads", num_threads()},
                        {"gemm", gemm_backend_name(gemm_backend())},
                        {"cpu", cpu_features().describe()},
                        {"num_speculative_tokens", K},
                        {"dspark_sps_curve", std::vector<double>(sps.begin() + 1, sps.end())}};
    std::ofstream(file) << f.dump(1) << "\n";
  }
  // The drafter is never loaded here: make_verify_policy needs only the config.
  const std::string head =
      R"({"method": "dspark", "model": ")" + dir.string() +
      R"(", "num_speculative_tokens": 4, "enable_adaptive_verification": true, "dspark_sps_curve": )";
  SpecConfig sc = SpecConfig::parse(head + "\"" + file + "\"}");
  ASSERT_EQ(sc.sps_curve.size(), sps.size() - 1);
  auto policy = make_verify_policy(sc, *target, DType::F32);
  auto* sched = dynamic_cast<PrefixLengthPolicy*>(policy.get());
  ASSERT_NE(sched, nullptr);
  sched->observe_drafting(1e-3, 1);
  EXPECT_GT(sched->drafting_cost(), 0) << "a loaded curve must learn the drafting cost too";

  std::ofstream(file) << R"({"dspark_sps_curve": [0.001, -2, 0.0005]})";
  std::string bad = error_of([&] { SpecConfig::parse(head + "\"" + file + "\"}"); });
  EXPECT_NE(bad.find(file), std::string::npos) << bad;
  EXPECT_NE(bad.find("'dspark_sps_curve' entry 1"), std::string::npos) << bad;
  std::ofstream(file) << R"({"steps": []})";
  bad = error_of([&] { SpecConfig::parse(head + "\"" + file + "\"}"); });
  EXPECT_NE(bad.find(file), std::string::npos) << bad;
  EXPECT_NE(bad.find("dspark_sps_curve"), std::string::npos) << bad;
  std::ofstream(file) << R"({"dspark_sps_curve": [0.001, 0.0005]})";  // shorter than K + 1
  SpecConfig shorter = SpecConfig::parse(head + "\"" + file + "\"}");
  bad = error_of([&] { make_verify_policy(shorter, *target, DType::F32); });
  EXPECT_NE(bad.find("field 'dspark_sps_curve' has 2 entries"), std::string::npos) << bad;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dspark
