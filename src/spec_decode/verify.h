// Verification of a drafted block against the target's distributions: greedy matching,
// token-level rejection sampling (Leviathan et al.), and block verification (Sun et al. 2024).
// All are lossless: the emitted tokens follow the target's distribution exactly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"
#include "spec_decode/spec_config.h"

namespace dspark {

struct VerifyInput {
  int vocab = 0;
  std::span<const int32_t> draft;  // x_1..x_l
  // Draft distributions q_1..q_l, dense [l][vocab]; nullptr: one-hot on the drafts (greedy
  // drafting, n-gram), which is exact because such proposals are deterministic.
  const float* q = nullptr;
  // Target distributions p_1..p_{l+1}, dense [l+1][vocab], after the request's temperature,
  // top-k, top-p and min-p; p_{l+1} gives the bonus token.
  const float* p = nullptr;
};

struct VerifyResult {
  int accepted = 0;        // drafts kept (x_1..x_accepted)
  int32_t next_token = -1;  // the corrected or bonus token that follows them
};

// Random streams of one request: draws for acceptance and for residual / bonus sampling are
// independent of each other and of the draft stream.
struct VerifyRng {
  Rng* accept = nullptr;
  Rng* residual = nullptr;
};

// Greedy (temperature 0): accept while x_i is the target's argmax; then emit the argmax.
VerifyResult verify_greedy(const VerifyInput& in);
// The same decision straight from the target's logits rows 1..l+1 (row i at logits + i * ld):
// no distributions are built, and rows after the first mismatch are never read.
VerifyResult verify_greedy_logits(std::span<const int32_t> draft, const float* logits, int64_t ld, int vocab);
// Token-level: accept x_i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection
// sample from norm(max(p_i - q_i, 0)); if all pass, sample the bonus from p_{l+1}.
VerifyResult verify_token_level(const VerifyInput& in, const VerifyRng& rng);
// Block verification (Sun et al. 2024, Algorithm 2): accept the longest prefix tau chosen from
// independent draws against thresholds computed from the running likelihood ratio and the
// residual masses; never fewer tokens in expectation than token-level.
VerifyResult verify_block(const VerifyInput& in, const VerifyRng& rng);

VerifyResult verify(RejectionMethod method, bool greedy, const VerifyInput& in, const VerifyRng& rng);

namespace testing {
using VerifyFn = VerifyResult (*)(const VerifyInput&, const VerifyRng&);
// Replaces the non-greedy verifier used by verify() (nullptr restores it). Tests only.
void set_verifier_override(VerifyFn fn);
// A deliberately wrong verifier for tests: token-level, but rejected positions resample from
// p instead of the residual. Tests must show it is biased.
VerifyResult verify_token_level_without_residual(const VerifyInput& in, const VerifyRng& rng);
// Another: token-level, but the residual is cut to the tokens where q > 0 (what a drafter over a
// draft vocabulary can propose), so tokens outside it are never sampled after a rejection.
VerifyResult verify_token_level_residual_within_draft_support(const VerifyInput& in, const VerifyRng& rng);
}  // namespace testing

}  // namespace dspark
