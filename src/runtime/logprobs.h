// Per-token log-probabilities (OpenAI's logprobs, vLLM's prompt_logprobs): for each token, its
// log-probability under the target, its rank, and the vocabulary's most likely tokens. Held flat
// (no allocation per token once the vectors have grown).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dspark {

// The most top entries a request may ask for per token (vLLM's default max_logprobs).
constexpr int kMaxLogprobs = 20;

struct Logprobs {
  int top_n = 0;                   // top entries per token
  std::vector<int32_t> token;      // the token each entry is about
  std::vector<float> logprob;      // its log-probability
  std::vector<int32_t> rank;       // 1 + the tokens more likely than it (vLLM's rank)
  std::vector<int32_t> top_token;  // [size()][top_n]: the most likely tokens, most likely first
  std::vector<float> top_logprob;  // [size()][top_n]: their log-probabilities

  size_t size() const { return token.size(); }
  bool empty() const { return token.empty(); }
  void clear();
  // Appends o's entries (o.top_n must equal top_n, unless this is empty).
  void append(const Logprobs& o);
  const int32_t* top_tokens(size_t i) const { return top_token.data() + i * size_t(top_n); }
  const float* top_logprobs(size_t i) const { return top_logprob.data() + i * size_t(top_n); }
};

// Appends one entry: log_softmax(logits) at `token`, its rank, and the `top_n` largest (ties: the
// lower id first). The log-softmax is of the raw logits (vLLM's default raw_logprobs mode: before
// temperature, top-k, top-p and min-p), its exponentials summed in double. Three vectorised passes
// over the row, nothing stored: the max with the rank's count, the top_n, the sum of exponentials.
void append_logprobs(const float* logits, int vocab, int32_t token, int top_n, Logprobs& out);

}  // namespace dspark
