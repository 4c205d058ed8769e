#include "sample/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"

namespace dspark {

void SamplingParams::validate() const {
  constexpr ErrorKind kInvalid = ErrorKind::InvalidRequest;
  if (!(temperature >= 0.f && temperature <= 1e6f))
    fail_request(kInvalid, "temperature", "temperature must be in [0, 1e6], got ", temperature);
  if (top_k < 0) fail_request(kInvalid, "top_k", "top_k must be >= 0 (0 disables it), got ", top_k);
  if (!(top_p > 0.f && top_p <= 1.f)) fail_request(kInvalid, "top_p", "top_p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.f && min_p <= 1.f)) fail_request(kInvalid, "min_p", "min_p must be in [0, 1], got ", min_p);
}

float TokenDist::prob_of(int32_t id) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == id) return probs[i];
  return 0.f;
}

namespace {

// Whether top-k or top-p can drop tokens by rank (else every token with mass is a candidate).
bool cuts_by_rank(const SamplingParams& p, int vocab) { return p.top_p < 1.f || (p.top_k > 0 && p.top_k < vocab); }

// Softmax at temperature T over the whole vocabulary into dst.
void softmax_at(const float* logits, int vocab, float temperature, float* dst) {
  const float mx = max_value(logits, vocab);
  const double sum = exp_shifted(logits, vocab, mx, 1.f / temperature, dst);
  kept_scale(dst, vocab, 0.f, float(1.0 / sum));
}

// With no cut by rank: min-p (drop tokens below min_p times the most likely one), then
// renormalise, in place; dropped tokens become 0.
void keep_above_min_p(float* probs, int vocab, float min_p) {
  const float floor = min_p * max_value(probs, vocab);
  kept_scale(probs, vocab, floor, float(1.0 / kept_sum(probs, vocab, floor)));
}

}  // namespace

void Sampler::distribution(const float* logits, int vocab, const SamplingParams& p, TokenDist& out) {
  out.ids.clear();
  out.probs.clear();
  if (p.greedy()) {
    out.ids.push_back(argmax(logits, vocab));
    out.probs.push_back(1.f);
    return;
  }
  probs_.resize(size_t(vocab));
  softmax_at(logits, vocab, p.temperature, probs_.data());
  if (!cuts_by_rank(p, vocab)) {
    // Nothing to cut by rank: keep every token, in id order (no sort).
    keep_above_min_p(probs_.data(), vocab, p.min_p);
    for (int i = 0; i < vocab; ++i) {
      if (probs_[size_t(i)] == 0.f) continue;
      out.ids.push_back(i);
      out.probs.push_back(probs_[size_t(i)]);
    }
    return;
  }

  // Candidates in descending probability. Only as many as needed are sorted: the top k
  // (top-k), or a growing prefix until it holds top_p of the mass.
  auto by_prob = [&](int32_t a, int32_t b) {
    float pa = probs_[size_t(a)], pb = probs_[size_t(b)];
    return pa > pb || (pa == pb && a < b);
  };
  order_.resize(size_t(vocab));
  for (int i = 0; i < vocab; ++i) order_[size_t(i)] = i;
  const int limit = p.top_k > 0 ? std::min(p.top_k, vocab) : vocab;
  int kept = limit;
  if (p.top_p >= 1.f) {
    std::partial_sort(order_.begin(), order_.begin() + limit, order_.end(), by_prob);
  } else if (limit < vocab) {
    // top-p within the top-k set: the smallest prefix holding top_p of that set's mass.
    std::partial_sort(order_.begin(), order_.begin() + limit, order_.end(), by_prob);
    double mass = 0;
    for (int i = 0; i < limit; ++i) mass += probs_[size_t(order_[size_t(i)])];
    double cum = 0;
    for (kept = 0; kept < limit;) {
      cum += probs_[size_t(order_[size_t(kept++)])];
      if (cum >= p.top_p * mass) break;
    }
  } else {
    // Sort a growing prefix until it holds top_p of the mass (usually the first 256 suffice).
    for (int take = std::min(vocab, 256);; take = std::min(vocab, take * 4)) {
      std::partial_sort(order_.begin(), order_.begin() + take, order_.end(), by_prob);
      double cum = 0;
      bool reached = false;
      for (kept = 0; kept < take;) {
        cum += probs_[size_t(order_[size_t(kept++)])];
        if (cum >= p.top_p) {
          reached = true;
          break;
        }
      }
      if (reached || take == vocab) break;
    }
  }
  // min-p: drop tokens below min_p times the most likely one.
  const float floor_p = p.min_p * probs_[size_t(order_[0])];
  double kept_mass = 0;
  for (int i = 0; i < kept; ++i) {
    const int32_t id = order_[size_t(i)];
    if (probs_[size_t(id)] < floor_p) break;
    out.ids.push_back(id);
    out.probs.push_back(probs_[size_t(id)]);
    kept_mass += probs_[size_t(id)];
  }
  const float renorm = float(1.0 / kept_mass);
  for (float& q : out.probs) q *= renorm;
}

int32_t Sampler::draw(const TokenDist& dist, Rng& rng) {
  if (dist.ids.size() == 1) return dist.ids[0];
  const double u = rng.uniform();
  double cum = 0;
  for (size_t i = 0; i < dist.ids.size(); ++i) {
    cum += dist.probs[i];
    if (u < cum) return dist.ids[i];
  }
  return dist.ids.back();
}

void Sampler::dense(const float* logits, int vocab, const SamplingParams& p, float* probs) {
  if (!p.greedy() && !cuts_by_rank(p, vocab)) {  // straight into the row: the same values distribution() keeps
    softmax_at(logits, vocab, p.temperature, probs);
    keep_above_min_p(probs, vocab, p.min_p);
    return;
  }
  std::fill(probs, probs + vocab, 0.f);
  distribution(logits, vocab, p, scratch_);
  for (size_t i = 0; i < scratch_.ids.size(); ++i) probs[scratch_.ids[i]] = scratch_.probs[i];
}

int32_t Sampler::draw_dense(const float* probs, int vocab, Rng& rng) {
  // The first token whose cumulative mass exceeds u; rounding: the last token with mass.
  return residual_pick(probs, nullptr, -1, 1.0, vocab, rng.uniform());
}

int32_t Sampler::sample(const float* logits, int vocab, const SamplingParams& p, Rng& rng) {
  if (p.greedy()) return argmax(logits, vocab);
  distribution(logits, vocab, p, scratch_);
  return draw(scratch_, rng);
}

}  // namespace dspark
