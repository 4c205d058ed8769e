#include "spec_decode/prefix_scheduler.h"

#include <algorithm>
#include <bit>
#include <tuple>

#include "core/error.h"

namespace dspark {

double PrefixScheduler::step_sps(int b) const {
  if (sps_.size() < 2) fail("prefix scheduler: empty SPS table");
  const int last = int(sps_.size()) - 1;
  double s = sps_[size_t(std::min(b, last))];
  if (b > last && last >= 2) {  // extrapolate the step time, never below the last entry's
    const double t1 = 1.0 / sps_[size_t(last)],
                 slope = std::max(0.0, t1 - 1.0 / sps_[size_t(last - 1)]);
    s = 1.0 / (t1 + slope * double(b - last));
  }
  return s;
}

double PrefixScheduler::sps(int b) const {
  const double s = step_sps(b);
  return draft_s_ > 0 ? 1.0 / (1.0 / s + draft_s_) : s;
}

namespace {
int requests_bucket(int requests) {
  return std::bit_width(unsigned(std::max(1, requests))) - 1;
}
}  // namespace

bool PrefixScheduler::should_draft(int requests, int /*other_tokens*/) {
  if (!learn_) return true;  // a fixed curve: Algorithm 1 alone decides
  ++steps_;
  const size_t b = size_t(requests_bucket(requests));
  if (rates_.size() < 2 * b + 2) rates_.resize(2 * b + 2);
  Rate &plain = rates_[2 * b], &spec = rates_[2 * b + 1];
  if (spec.observed < 4) return true;
  if (plain.observed < 4) return false;
  const bool drafting_wins = spec.tokens_per_s >= plain.tokens_per_s;
  Rate& loser = drafting_wins ? plain : spec;
  if (steps_ - loser.last_step >= kProbeEvery) {
    loser.last_step = steps_;  // one probe, then the winner again until the next
    return !drafting_wins;
  }
  return drafting_wins;
}

void PrefixScheduler::observe_step(int requests, bool drafted, int tokens, double seconds,
                                   int decode_rows, int other_rows) {
  if (!learn_ || !(seconds > 0)) return;
  // Prompt chunks in the same forward are not the decoding requests' cost: their share of the
  // step time (by SPS(B)) is taken out, so arrivals do not make either kind look slow.
  if (other_rows > 0 && decode_rows > 0) {
    const double all = 1.0 / step_sps(decode_rows + other_rows), own = 1.0 / step_sps(decode_rows);
    seconds = std::max(seconds * 0.05, seconds - (all - own));
  }
  const size_t b = size_t(requests_bucket(requests));
  if (rates_.size() < 2 * b + 2) rates_.resize(2 * b + 2);
  Rate& r = rates_[2 * b + (drafted ? 1 : 0)];
  // Tokens over seconds of the recent steps (decayed sums): the throughput those steps gave,
  // which a mean of per-step rates would not be (it over-weights short steps).
  r.tokens = 0.9 * r.tokens + double(tokens);
  r.seconds = 0.9 * r.seconds + seconds;
  r.tokens_per_s = r.tokens / r.seconds;
  ++r.observed;
  r.last_step = steps_;
}

void PrefixScheduler::observe_drafting(double seconds) {
  if (!learn_ || !(seconds >= 0)) return;
  // The plain mean over the first rounds, then an exponential average that follows load changes.
  ++observed_;
  const double w = std::max(1.0 / double(observed_), 1.0 / 32.0);
  draft_s_ += w * (seconds - draft_s_);
}

void PrefixScheduler::choose(std::span<const Draft* const> drafts, std::span<int> lengths) {
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
  int B = R + other_tokens_;
  double tau = R;
  double best_theta = tau * sps(B);
  for (const Cand& c : cands) {
    if (c.j != l[size_t(c.r)] + 1) continue;  // only prefixes (survival never grows with j)
    l[size_t(c.r)] = c.j;
    B += 1;
    tau += c.a;
    const double theta = tau * sps(B);
    if (theta > best_theta) {
      best_theta = theta;
      best = l;
    } else if (early_stop()) {
      break;
    }
  }
  for (int r = 0; r < R; ++r) lengths[size_t(r)] = best[size_t(r)];
}

}  // namespace dspark
