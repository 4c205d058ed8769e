#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/forward.h"

namespace dspark {

struct PerplexityScorer::Impl {
  Impl(const Model& m, int max_window, int chunk, DType kv_dtype)
      : model(m),
        kv(m.config().num_layers, m.config().num_kv_heads, m.config().head_dim, kv_dtype, std::max(1, max_window)),
        fwd(m, kv),
        chunk(std::max(1, chunk)),
        probs(size_t(m.config().vocab_size)) {}
  const Model& model;
  KvCache kv;
  Forward fwd;
  int chunk;
  std::vector<float> probs;  // exp_shifted's output (unused beyond the sum)
  Batch batch;
};

PerplexityScorer::PerplexityScorer(const Model& model, int max_window, int chunk,
                                   std::optional<DType> kv_dtype)
    : impl_(std::make_unique<Impl>(model, max_window, chunk, kv_dtype.value_or(model.dtype()))) {}

PerplexityScorer::~PerplexityScorer() = default;

WindowScore PerplexityScorer::score(std::span<const int32_t> tokens) {
  Impl& s = *impl_;
  const int n = int(tokens.size());
  const int V = s.model.config().vocab_size;
  for (int32_t t : tokens)
    if (t < 0 || t >= V) fail("token id ", t, " is outside the model's vocabulary (", V, ")");
  WindowScore out;
  if (n < 2) return out;
  out.greedy.reserve(size_t(n - 1));
  const int seq = s.kv.create_sequence();
  try {
    // Rows 0 .. n-2 predict tokens 1 .. n-1; the last token needs no row.
    for (int p0 = 0; p0 < n - 1; p0 += s.chunk) {
      const int rows = std::min(s.chunk, n - 1 - p0);
      s.batch.clear();
      for (int i = 0; i < rows; ++i) s.batch.add(tokens[size_t(p0 + i)], p0 + i, seq, true);
      const ForwardOutput& o = s.fwd.run(s.batch, {});
      for (int i = 0; i < rows; ++i) {
        const float* logits = o.logits_row(i);
        const float mx = max_value(logits, V);
        const double sum = exp_shifted(logits, V, mx, 1.f, s.probs.data());
        const int32_t next = tokens[size_t(p0 + i + 1)];
        out.nll_sum += std::log(sum) + double(mx) - double(logits[next]);
        out.greedy.push_back(argmax(logits, V));
      }
    }
  } catch (...) {
    s.kv.free_sequence(seq);
    throw;
  }
  s.kv.free_sequence(seq);
  out.predicted = n - 1;
  return out;
}

}  // namespace dspark
