// Perplexity of the engine's model (any dtype, GGUF or quantized on load) on token windows:
// the next-token negative log-likelihood of every position, from the same forward pass that
// decoding runs. `dspark model perplexity` reads the windows from a tokenized corpus split.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/model.h"

namespace dspark {

struct WindowScore {
  double nll_sum = 0;  // sum over the n - 1 predicted tokens of -log p(token | everything before it)
  int predicted = 0;   // n - 1
  // The greedy choice after each of the first n - 1 tokens (argmax of the logits).
  std::vector<int32_t> greedy;
};

class PerplexityScorer {
 public:
  // `max_window`: the longest window scored (KV room); `chunk`: rows per forward pass (bounds
  // the logits buffer at chunk x vocab floats).
  // `kv_dtype`: the KV cache's element type (the model's dtype unless given).
  PerplexityScorer(const Model& model, int max_window, int chunk = 64,
                   std::optional<DType> kv_dtype = std::nullopt);
  ~PerplexityScorer();

  // Scores tokens [0, n) as one sequence from position 0, in float64 log-softmax over the
  // logits. Errors name the token id outside the vocabulary.
  WindowScore score(std::span<const int32_t> tokens);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dspark
