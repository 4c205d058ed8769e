#include "spec_decode/verify.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"

namespace dspark {

namespace {

// A uniform in (0, 1]: never 0, so a zero-probability draft is never accepted.
double uniform_open(Rng& rng) { return 1.0 - rng.uniform(); }

float q_at(const VerifyInput& in, int i, int32_t token) {
  if (!in.q) return token == in.draft[size_t(i)] ? 1.f : 0.f;
  return in.q[int64_t(i) * in.vocab + token];
}

// Samples from norm(max(scale * p - q, 0)) over the vocabulary (q one-hot on `onehot_token`
// when `q` is null); falls back to p when the residual has (almost) no mass.
int32_t sample_residual(const float* p, const float* q, int32_t onehot_token, double scale, int vocab, Rng& rng) {
  const double mass = residual_mass(p, q, onehot_token, scale, vocab);
  const double u = rng.uniform();
  if (mass <= 1e-8) return residual_pick(p, nullptr, -1, 1.0, vocab, u);  // no residual: the target's own distribution
  return residual_pick(p, q, onehot_token, scale, vocab, u * mass);
}

int32_t sample_dense(const float* p, int vocab, Rng& rng) {
  return sample_residual(p, nullptr, -1, 1.0, vocab, rng);  // q = 0 everywhere: p itself
}

const float* q_row(const VerifyInput& in, int i) { return in.q ? in.q + int64_t(i) * in.vocab : nullptr; }
const float* p_row(const VerifyInput& in, int i) { return in.p + int64_t(i) * in.vocab; }

}  // namespace

VerifyResult verify_greedy(const VerifyInput& in) { return verify_greedy_logits(in.draft, in.p, in.vocab, in.vocab); }

VerifyResult verify_greedy_logits(std::span<const int32_t> draft, const float* logits, int64_t ld, int vocab) {
  VerifyResult r;
  const int l = int(draft.size());
  for (int i = 0; i <= l; ++i) {
    const int32_t best = argmax(logits + int64_t(i) * ld, vocab);
    if (i == l || draft[size_t(i)] != best) {
      r.next_token = best;
      return r;
    }
    ++r.accepted;
  }
  return r;
}

VerifyResult verify_token_level(const VerifyInput& in, const VerifyRng& rng) {
  VerifyResult r;
  const int l = int(in.draft.size());
  for (int i = 0; i < l; ++i) {
    const int32_t x = in.draft[size_t(i)];
    const double pv = p_row(in, i)[x], qv = q_at(in, i, x);
    const double u = uniform_open(*rng.accept);
    if (qv > 0 && u * qv <= pv) {
      ++r.accepted;
      continue;
    }
    r.next_token = sample_residual(p_row(in, i), q_row(in, i), x, 1.0, in.vocab, *rng.residual);
    return r;
  }
  r.next_token = sample_dense(p_row(in, l), in.vocab, *rng.residual);
  return r;
}

VerifyResult verify_block(const VerifyInput& in, const VerifyRng& rng) {
  const int l = int(in.draft.size());
  // P[i]: running likelihood ratio of the first i drafts, capped at 1 (P[0] = 1).
  thread_local std::vector<double> P;  // reused: no allocation per round
  P.assign(size_t(l) + 1, 1.0);
  for (int i = 1; i <= l; ++i) {
    const int32_t x = in.draft[size_t(i - 1)];
    const double qv = q_at(in, i - 1, x);
    const double ratio = qv > 0 ? double(p_row(in, i - 1)[x]) / qv : 0.0;
    P[size_t(i)] = std::min(P[size_t(i - 1)] * ratio, 1.0);
  }
  // Thresholds h_i: for i < l from the residual mass at the next position; h_l = P_l.
  int tau = 0;
  for (int i = 1; i <= l; ++i) {
    double h;
    if (i == l) {
      h = P[size_t(l)];
    } else {
      const float* p = p_row(in, i);
      const float* q = q_row(in, i);
      const double R = residual_mass(p, q, in.draft[size_t(i)], P[size_t(i)], in.vocab);
      const double den = R + 1.0 - P[size_t(i)];
      h = den <= 0 ? 1.0 : R / den;
    }
    const double eta = uniform_open(*rng.accept);  // one independent draw per position
    if (eta <= h) tau = i;
  }
  VerifyResult r;
  r.accepted = tau;
  if (tau == l) r.next_token = sample_dense(p_row(in, l), in.vocab, *rng.residual);
  else
    r.next_token = sample_residual(p_row(in, tau), q_row(in, tau), in.draft[size_t(tau)], P[size_t(tau)], in.vocab,
                                   *rng.residual);
  return r;
}

namespace {
testing::VerifyFn g_override = nullptr;
}

VerifyResult verify(RejectionMethod method, bool greedy, const VerifyInput& in, const VerifyRng& rng) {
  if (!in.p || in.vocab <= 0) fail("verify: no target distributions");
  if (greedy) return verify_greedy(in);
  if (g_override) return g_override(in, rng);
  return method == RejectionMethod::Block ? verify_block(in, rng) : verify_token_level(in, rng);
}

namespace testing {
void set_verifier_override(VerifyFn fn) { g_override = fn; }

namespace {
// Token-level acceptance, as verify_token_level, with the token after a rejection drawn by
// `resample(in, i, rng)`: the broken verifiers below differ only there.
template <class Resample>
VerifyResult token_level_with(const VerifyInput& in, const VerifyRng& rng, Resample resample) {
  VerifyResult r;
  const int l = int(in.draft.size());
  for (int i = 0; i < l; ++i) {
    const int32_t x = in.draft[size_t(i)];
    const double pv = p_row(in, i)[x], qv = q_at(in, i, x);
    if (qv > 0 && uniform_open(*rng.accept) * qv <= pv) {
      ++r.accepted;
      continue;
    }
    r.next_token = resample(i, *rng.residual);
    return r;
  }
  r.next_token = sample_dense(p_row(in, l), in.vocab, *rng.residual);
  return r;
}
}  // namespace

VerifyResult verify_token_level_without_residual(const VerifyInput& in, const VerifyRng& rng) {
  return token_level_with(in, rng, [&](int i, Rng& g) {
    return sample_dense(p_row(in, i), in.vocab, g);  // the bug: no residual
  });
}

VerifyResult verify_token_level_residual_within_draft_support(const VerifyInput& in, const VerifyRng& rng) {
  thread_local std::vector<float> cut;
  return token_level_with(in, rng, [&](int i, Rng& g) {
    const float* q = q_row(in, i);
    cut.assign(p_row(in, i), p_row(in, i) + in.vocab);
    if (q)
      for (int v = 0; v < in.vocab; ++v)
        if (q[v] <= 0) cut[size_t(v)] = 0;  // the bug: tokens the drafter cannot propose are dropped
    return sample_residual(cut.data(), q, in.draft[size_t(i)], 1.0, in.vocab, g);
  });
}
}  // namespace testing

}  // namespace dspark
