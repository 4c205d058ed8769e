#include "spec_decode/verify_length_prefix.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <tuple>

#include "core/error.h"

namespace dspark {

double PrefixLengthPolicy::step_seconds(int b) const {
  if (sps_.size() < 2) fail("prefix length policy: empty SPS table");
  const int last = int(sps_.size()) - 1;
  double t = 1.0 / sps_[size_t(std::clamp(b, 1, last))];
  if (b > last && last >= 2) {  // extrapolate the step time, never below the last entry's
    const double slope = std::max(0.0, t - 1.0 / sps_[size_t(last - 1)]);
    t += slope * double(b - last);
  }
  return t;
}

namespace {
// Buckets of requests (each count up to kExactRequests, then 17-31, 32-63, ...) and of their
// mean cached positions (below 256, then 256-511, 512-1023, ...): one gate per pair. Drafting's
// worth changes fast with the load where a step's cost grows with its rows: on two cores it broke
// even at 4 requests and lost a third at 7, so 4-7 in one gate let a gate learned at 4 draft at 7.
size_t gate_index(int requests, size_t context_bucket) {
  constexpr int kExactRequests = 16;
  constexpr size_t kRequestBuckets = kExactRequests + 32;
  const int r = std::max(1, requests);
  const size_t b = r <= kExactRequests
                       ? size_t(r - 1)
                       : size_t(kExactRequests) + size_t(std::bit_width(unsigned(r)) - 5);
  return context_bucket * kRequestBuckets + b;
}
}  // namespace

void PrefixLengthPolicy::set_contexts(std::span<const int> positions) {
  double mean = 0;
  for (int p : positions) mean += double(p);
  mean /= double(std::max<size_t>(1, positions.size()));
  context_bucket_ = size_t(std::bit_width(unsigned(std::max(0.0, mean) / 256.0)));
}

PrefixLengthPolicy::Gate& PrefixLengthPolicy::gate(int requests) {
  const size_t b = gate_index(requests, context_bucket_);
  if (gates_.size() <= b) gates_.resize(b + 1);
  Gate& g = gates_[b];
  if (g.seen) return g;
  g.seen = true;
  // A load first seen starts where the nearest lighter load seen at this context stands when
  // drafting loses there: more requests make a step's rows dearer, so it loses here too. It
  // waits as long as that gate before its first probe, instead of probing at once (on two cores
  // a probe at 16 requests costs about four plain steps, and a sweep meets a dozen new loads).
  if (behind_losing(requests)) stop_drafting(g, nearest_lighter(requests)->probe_every);
  return g;
}

void PrefixLengthPolicy::stop_drafting(Gate& g, int probe_every) {
  g.drafting = false;
  g.last_step = steps_;
  g.admitted_seen = admitted_;
  g.probe_every = probe_every;
}

bool PrefixLengthPolicy::behind_losing(int requests) const {
  const Gate* l = nearest_lighter(requests);
  if (!l || l->drafting) return false;
  // Stopped on the prediction (or too few drafted steps to tell), it holds back; measured, only
  // where it loses without its switching costs.
  if (l->intrinsic.n < kMeasuredMin || l->plain.n < kMeasuredMin) return true;
  return l->intrinsic.per_second() < (1 - kHysteresis) * l->plain.per_second();
}

const PrefixLengthPolicy::Gate* PrefixLengthPolicy::nearest_lighter(int requests) const {
  const size_t b = gate_index(requests, context_bucket_);
  for (int r = requests - 1; r >= 1; --r) {
    const size_t i = gate_index(r, context_bucket_);
    if (i != b && i < gates_.size() && gates_[i].seen) return &gates_[i];
  }
  return nullptr;
}

const PrefixLengthPolicy::Gate* PrefixLengthPolicy::find_gate(int requests) const {
  const size_t b = gate_index(requests, context_bucket_);
  return b < gates_.size() ? &gates_[b] : nullptr;
}

double PrefixLengthPolicy::measured_gain(int requests) const {
  const Gate* g = find_gate(requests);
  return g && g->measured() ? g->rate_gain() : 0.0;
}

double PrefixLengthPolicy::predicted_gain(int requests) const {
  const Gate* g = find_gate(requests);
  return g ? g->gain : 0.0;
}

bool PrefixLengthPolicy::should_draft(int requests) {
  if (!learn_) return true;  // no drafting cost measured: Algorithm 1 alone decides
  ++steps_;
  Gate& g = gate(requests);
  if (g.drafting) {
    // Now and then a plain step, so that what drafting is judged against is measured too.
    // Rarely while drafting wins by far, measured or, before that, predicted: there the plain
    // steps' exact rate decides nothing.
    const bool far_ahead = g.measured() ? g.rate_gain() >= kFarAhead : g.gain >= kFarAhead;
    const int every = far_ahead                  ? kExploreRarely
                      : g.plain.n < kMeasuredMin ? kExploreFirst
                                                 : kExploreEvery;
    if (++g.since_plain >= every) {
      g.since_plain = 0;
      return false;
    }
    return true;
  }
  // Behind a lighter load that loses, this one loses too (its rounds have more rows): the lighter
  // gate's own probes find when drafting pays again, so this one probes only rarely. At 16
  // requests on two cores a probe cost about three plain steps, and each of the loads 9-16 probed
  // on its own: 3-4% of a sweep's steps at 16 users.
  const int every = behind_losing(requests) ? std::max(g.probe_every, kProbeBehind) : g.probe_every;
  const bool new_text = requests == 1 && g.admitted_seen != admitted_;  // request_admitted()
  if (steps_ - g.last_step >= every || new_text) {
    // A probe: its prediction or its measurement decides whether drafting resumes.
    g.last_step = steps_;
    g.admitted_seen = admitted_;
    return true;
  }
  return false;
}

void PrefixLengthPolicy::Cost::add(double x, double cell) {
  recent[size_t(n % kCostWindow)] = x;
  ++n;
  // The mean of the middle half of the recent samples: a few slow ones (a cold first step, a
  // core taken by another process) move it little, and it follows a lasting change within about
  // half a window.
  const size_t k = size_t(std::min<int64_t>(n, kCostWindow));
  std::array<double, kCostWindow> v;
  std::copy_n(recent.begin(), k, v.begin());
  std::sort(v.begin(), v.begin() + ptrdiff_t(k));
  const size_t lo = k / 4, hi = k - k / 4;
  double sum = 0;
  for (size_t i = lo; i < hi; ++i) sum += v[i];
  mean = sum / double(hi - lo);
  // On a grid of `cell`, moved only when the mean is more than 3/4 of a cell away (the cell's
  // half plus a quarter): a mean that hovers on a cell edge keeps one value.
  if (n == 1 || std::fabs(mean - used) > 0.75 * cell) used = std::round(mean / cell) * cell;
}

void PrefixLengthPolicy::observe_drafting(double seconds, int requests) {
  if (!learn_ || !(seconds >= 0) || requests < 1) return;
  draft_.add(seconds / requests, step_seconds(1) * kCostGrid);
}

namespace {
// What a losing probe cost, in plain steps (a plain step yields one token per request), and the
// gap between probes that keeps them within kProbeBudget of the plain steps' throughput: a probe
// at half the plain rate that takes 3.5 plain steps (8 requests on 2 cores) waits about 350.
int affordable_gap(double plain_rate, int requests, int tokens, double seconds) {
  const double lost = (plain_rate * seconds - double(tokens)) / double(std::max(1, requests));
  return int(std::clamp(std::ceil(lost / PrefixLengthPolicy::kProbeBudget), 0.0,
                        double(PrefixLengthPolicy::kProbeLongest)));
}
}  // namespace

void PrefixLengthPolicy::observe_step(int requests, bool drafted, int tokens, double seconds,
                                      int decode_rows, int other_rows, double switching) {
  if (!learn_ || !(seconds > 0) || decode_rows <= 0) return;
  // A step with prompt chunks measures mostly their prefill, which it pays whether it drafts or
  // not: a few such steps among the plain ones made a 15-request gate measure drafting 1.2-1.3x
  // ahead while its steps without prompts ran at 0.54x of plain ones. Neither the rates nor o
  // learn from them.
  if (other_rows > 0) return;
  // The measured judge: decayed tokens and seconds of each kind of step at this load.
  Gate& g = gate(requests);
  (drafted ? (last_full_ ? g.full : g.drafted) : g.plain).add(double(tokens), seconds);
  if (drafted) g.intrinsic.add(double(tokens), std::max(0.0, seconds - switching));
  if (g.full.n >= kMeasuredMin && g.drafted.n >= kMeasuredMin) {
    const double r = g.full.per_second() / g.drafted.per_second();
    if (r >= 1 + kHysteresis) g.full_blocks = true;
    if (r < 1 - kHysteresis) g.full_blocks = false;
  }
  if (g.measured()) {
    // The cut loses, and whole blocks were tried too rarely to know: they take the rounds until
    // measured, before drafting stops (at 4 users on math the cut ran at 0.96x plain and whole
    // blocks at 1.2x, but a gate that stopped here met whole blocks one probe in eight).
    if (g.drafting && g.rate_gain() < 1 - kHysteresis) {
      if (g.full.n < kMeasuredMin) {
        g.full_blocks = true;
      } else {  // drafting loses: plain steps, probed
        // Soon, unless this is a probe's resumption that lost within kResumeTrial steps: then
        // twice the gap before that probe. A single round's luck can win a probe where drafting
        // loses by a little (4 users on MT-Bench), and each resumption costs rounds that lose.
        const bool failed_resume = g.resumed_at >= 0 && steps_ - g.resumed_at < kResumeTrial;
        stop_drafting(g, failed_resume
                             ? std::min(2 * std::max(g.resumed_gap, kProbeFirst), kProbeLongest)
                             : kProbeFirst);
        g.resumed_at = -1;
      }
    } else if (!g.drafting && drafted) {  // a probe, judged on its own against the plain steps
      // ... on its time less the switch: the rows held through the plain run before it (the
      // drafter's catch-up) grow with that run, so counted in, each losing probe's longer gap
      // made the next one dearer still, and a gate stopped by a noisy moment stayed stopped
      // (`make demo`'s out-of-domain line at 0.97x plain, its few rounds 2.14 ms of drafting
      // against 0.58, where it runs at 1.3x). What the switch costs still spaces the probes.
      const double own = std::max(seconds - switching, 1e-9);
      if ((double(tokens) / own) / g.plain.per_second() >= 1 + kHysteresis) {
        // Drafting resumes, and the probe's way is judged afresh: on the rounds from this probe
        // on (the prompt or the load may have changed since it lost). The other way keeps its
        // rate, so that a gate resumed by whole blocks stays measured and keeps them (the cut's
        // lost).
        g.drafting = true;
        g.since_plain = 0;
        g.resumed_at = steps_;
        g.resumed_gap = g.probe_every;
        Gate::Rate& way = last_full_ ? g.full : g.drafted;
        way = {};
        way.add(double(tokens), seconds);
        g.intrinsic = {};
        g.intrinsic.add(double(tokens), std::max(0.0, seconds - switching));
      } else {
        g.last_step = steps_;
        g.probe_every =
            std::max(std::min(2 * g.probe_every, kProbeMax),
                     std::min(affordable_gap(g.plain.per_second(), requests, tokens, seconds),
                              kProbeGrowth * g.probe_every));
        // A losing cut: the next probes verify whole blocks until they are measured too (at 4
        // users on math a gate that stopped on the prediction probed with the cut only, at 0.84x
        // plain, while whole blocks ran at 1.45x at 3 users).
        if (!last_full_ && g.full.n < kMeasuredMin) g.full_blocks = true;
      }
    }
  } else if (!g.drafting && drafted) {
    // A drafted step that the prediction judged a loss (choose() stopped drafting or kept a probe
    // losing, before enough steps are measured): spaced by its cost as well, against the plain
    // steps' measured rate or, before any, the curve's (the first probe at a new load).
    const double plain =
        g.plain.n > 0 ? g.plain.per_second() : requests / (step_seconds(requests) + over_.used);
    g.probe_every = std::max(
        g.probe_every,
        std::min(affordable_gap(plain, requests, tokens, seconds), kProbeGrowth * g.probe_every));
  }
  if (drafted) return;
  const double o = std::max(0.0, seconds - step_seconds(decode_rows));
  over_.add(o, step_seconds(1) * kCostGrid);
}

void PrefixLengthPolicy::choose(std::span<const Draft* const> drafts, std::span<int> lengths) {
  last_full_ = false;
  if (learn_ && !drafts.empty()) {
    Gate& g = gate(int(drafts.size()));
    if (g.measured()) {
      // The way not in use is tried rarely once it measures far behind (MT-Bench at 4 users:
      // whole blocks at 0.6x the cut's rate).
      const bool both = g.full.n >= kMeasuredMin;
      const double behind = both ? std::min(g.full.per_second(), g.drafted.per_second()) /
                                       std::max(g.full.per_second(), g.drafted.per_second())
                                 : 1.0;
      const int every = !both                    ? kExploreFirst
                        : behind < 1 / kFarAhead ? kExploreRarely
                                                 : kExploreEvery;
      const bool other = ++g.since_arm >= every;  // the way not in use, now and then
      if (other) g.since_arm = 0;
      if (g.full_blocks != other) {
        for (size_t r = 0; r < drafts.size(); ++r) lengths[r] = int(drafts[r]->tokens.size());
        last_full_ = true;
        return;
      }
    }
  }
  struct Cand {
    double a;
    int r, j;  // request, position (1-based)
  };
  std::vector<Cand> cands;
  for (size_t r = 0; r < drafts.size(); ++r) {
    const Draft& d = *drafts[r];
    double a = 1.0;
    for (size_t j = 0; j < d.tokens.size(); ++j) {
      a *= d.confidence.empty() ? 1.0 : double(d.confidence[j]);
      if (a <= 0) break;
      cands.push_back({a, int(r), int(j) + 1});
    }
  }
  // Descending survival; ties by (request, position), so each request's positions come in order.
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& x, const Cand& y) {
    return std::tie(y.a, x.r, x.j) < std::tie(x.a, y.r, y.j);
  });
  const int R = int(drafts.size());
  std::vector<int> l(size_t(R), 0), best(size_t(R), 0);
  // This round's drafting (already spent) and every step's cost beyond the forward.
  const double d = learn_ ? draft_.used * R : 0.0, o = learn_ ? over_.used : 0.0;
  // Prompt chunks in the step are left out: they are paid whatever is verified, and their rows
  // would dilute the drafts' cost (tau / t(B + prompt rows) favours every draft). On a curve that
  // is linear there, as on these CPUs, a draft's marginal cost is the same with or without them.
  int B = R;
  double tau = R;
  const double plain = R / (step_seconds(B) + o);  // a plain step, without drafting
  double best_theta = tau / (step_seconds(B) + d + o);
  for (const Cand& c : cands) {
    if (c.j != l[size_t(c.r)] + 1) continue;  // only prefixes (survival never grows with j)
    l[size_t(c.r)] = c.j;
    B += 1;
    tau += c.a;
    const double theta = tau / (step_seconds(B) + d + o);
    if (theta > best_theta) {
      best_theta = theta;
      best = l;
    } else if (early_stop()) {
      break;
    }
  }
  bool any = false;
  for (int r = 0; r < R; ++r) {
    lengths[size_t(r)] = best[size_t(r)];
    any = any || best[size_t(r)] > 0;
  }
  if (!any && R > 0) ++empty_rounds_;
  if (!learn_ || R == 0) return;
  // The drafting-or-not gate for the coming steps at this load: the gain this round predicted,
  // with the better of its lengths and whole blocks (the early stop can halt where a step's cost
  // rises steeply for a few rows, before lengths where the whole block pays; the rounds' way is
  // then measured).
  double tau_full = R;
  int b_full = R;
  for (const Cand& c : cands) tau_full += c.a;
  for (const Draft* d : drafts) b_full += int(d->tokens.size());
  const double gain = std::max(best_theta, tau_full / (step_seconds(b_full) + d + o)) / plain;
  Gate& g = gate(R);
  if (g.drafting || g.measured()) {
    g.gain = g.gain > 0 ? kGainDecay * g.gain + (1 - kGainDecay) * gain : gain;
    // Once measured, observe_step's measurement decides; the prediction is only reported.
    if (!g.measured() && g.gain < 1 - kHysteresis)  // drafting costs more than it brings
      stop_drafting(g, kProbeFirst);
  } else {  // a probe
    g.gain = gain;
    if (gain >= 1 + kHysteresis) {
      g.drafting = true;
      g.since_plain = 0;
    } else {
      g.last_step = steps_;
      g.probe_every = std::min(2 * g.probe_every, kProbeMax);
    }
  }
}

}  // namespace dspark
