// Sampling: logits -> the distribution a request samples from -> a token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/rng.h"

namespace dspark {

struct SamplingParams {
  float temperature = 0.f;  // 0 (or below 1e-5): greedy argmax
  int top_k = 0;            // 0: off
  float top_p = 1.f;        // 1: off
  float min_p = 0.f;        // 0: off
  uint64_t seed = 0;

  bool greedy() const { return temperature < 1e-5f; }
  void validate() const;  // throws Error naming the bad field
};

// A sparse probability distribution: the tokens that survive top-k / top-p / min-p, with
// their renormalised probabilities (greedy: one token with probability 1).
struct TokenDist {
  std::vector<int32_t> ids;
  std::vector<float> probs;
  float prob_of(int32_t id) const;  // 0 when id is not kept
};

class Sampler {
 public:
  // Applies, in order: temperature, top-k, top-p, min-p; writes the kept distribution.
  // Reuses internal buffers (no allocation once warmed up).
  void distribution(const float* logits, int vocab, const SamplingParams& p, TokenDist& out);
  // Draws a token from `dist` with one uniform from rng.
  static int32_t draw(const TokenDist& dist, Rng& rng);
  // The same distribution over the whole vocabulary: probs[vocab], zero outside the kept set
  // (greedy: one-hot on the argmax).
  void dense(const float* logits, int vocab, const SamplingParams& p, float* probs);
  // Draws from a dense distribution with one uniform from rng.
  static int32_t draw_dense(const float* probs, int vocab, Rng& rng);
  // distribution() then draw(); greedy returns the argmax without touching rng.
  int32_t sample(const float* logits, int vocab, const SamplingParams& p, Rng& rng);

 private:
  Buffer<float> probs_;
  std::vector<int32_t> order_;
  TokenDist scratch_;
};

}  // namespace dspark
