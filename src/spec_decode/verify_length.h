// The verification length: how many drafted tokens each request verifies this step. This is the
// seam where the calibrated, hardware-aware length policy (DSpark Algorithm 1,
// verify_length_prefix.h) plugs in.
//
// A policy must be non-anticipating: whether draft k is verified may depend on c_1..c_k
// (which see x_1..x_{k-1}) but never on x_k itself, or the output stops being the target's.
#pragma once

#include <span>

#include "spec_decode/drafter.h"

namespace dspark {

class VerifyLengthPolicy {
 public:
  virtual ~VerifyLengthPolicy() = default;
  // drafts[r] is request r's proposal; writes lengths[r] in [0, drafts[r]->tokens.size()].
  virtual void choose(std::span<const Draft* const> drafts, std::span<int> lengths) = 0;
  // After each round: how long drafting took for `requests` requests. Policies that weigh a
  // round's fixed cost learn it from here (only past rounds, so a choice never depends on the
  // draft it is about).
  virtual void observe_drafting(double /*seconds*/, int /*requests*/) {}
  // Before should_draft, every step with decoding requests: each one's cached positions (the
  // anchor's position).
  virtual void set_contexts(std::span<const int> /*positions*/) {}
  // Asked before drafting: whether a round with drafts can beat a plain decoding step for
  // `requests` decoding requests this step, judged from past rounds only (never from the drafts
  // about to be made, so skipping keeps the output the target's). false: the step decodes one
  // token per request and the drafter is not run.
  virtual bool should_draft(int /*requests*/) { return true; }
  // A request got its place (a new one, or one back from preemption).
  virtual void request_admitted() {}
  // After each step with decoding requests: how many there were, whether they drafted, the
  // tokens they emitted, the step's seconds (drafting, forward, verification and delivering the
  // outputs; the engine calls it once they are delivered), and the rows of
  // the forward that were theirs (anchors and drafts) and other requests' (prompt chunks), and of
  // the seconds, what a drafted step paid to switch to drafting (the drafter given the rows of
  // plain steps before it).
  virtual void observe_step(int /*requests*/, bool /*drafted*/, int /*tokens*/, double /*seconds*/,
                            int /*decode_rows*/, int /*other_rows*/, double /*switching*/ = 0) {}
};

// Verifies every drafted token.
class FullBlockPolicy : public VerifyLengthPolicy {
 public:
  void choose(std::span<const Draft* const> drafts, std::span<int> lengths) override {
    for (size_t r = 0; r < drafts.size(); ++r) lengths[r] = int(drafts[r]->tokens.size());
  }
};

// Static confidence threshold: verify up to (not including) the first draft whose conditional
// confidence c_k is below the threshold.
class StaticThresholdPolicy : public VerifyLengthPolicy {
 public:
  explicit StaticThresholdPolicy(float threshold) : threshold_(threshold) {}
  void choose(std::span<const Draft* const> drafts, std::span<int> lengths) override {
    for (size_t r = 0; r < drafts.size(); ++r) {
      const Draft& d = *drafts[r];
      int l = 0;
      while (l < int(d.tokens.size()) &&
             (d.confidence.empty() || d.confidence[size_t(l)] >= threshold_))
        ++l;
      lengths[r] = l;
    }
  }

 private:
  float threshold_;
};

}  // namespace dspark
