// The output processor: turns each emitted token into text (the streaming detokenizer and stop
// strings), ends requests (stop ids, stop strings, max_tokens, aborts) with their finish reasons,
// hands every request its outputs, finished requests' hidden states to the connector, and keeps
// the engine's metrics (and a run's speculative figures, when asked). Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "runtime/engine_options.h"
#include "runtime/metrics.h"
#include "runtime/request_state.h"

namespace dspark {

class OutputProcessor {
 public:
  // `K`: the drafts a round verifies at most (0 without a drafter).
  OutputProcessor(const ModelConfig& cfg, const EngineOptions& opt, int K);

  // Emits one token; returns false when the request is done (a stop id, a stop string or
  // max_tokens reached: finish() was called). `logits`: the target's row that predicted it, for
  // the request's logprobs (GenerateParams::logprobs).
  bool emit(RequestState& r, int32_t token, const float* logits);
  // Scores the prompt token at `pos` (1 .. prompt_len - 1) from the logits of the row before it,
  // once (a recomputed row after preemption is skipped).
  void score_prompt(RequestState& r, int pos, const float* logits);
  // Ends `r` with `reason` ("stop", "length", "abort"): flushes the held-back text, unless a stop
  // string ends it first (then "stop").
  void finish(RequestState& r, const char* reason);
  // Hands out the pending output of every request of `q`, exports finished requests that asked,
  // and moves the finished ones to `done`.
  void deliver(RequestQueue& q, RequestQueue& done, double now);

  // Metrics.
  EngineMetrics& metrics() { return live_; }
  // Also add every round's figures to *m (null: none).
  void collect_spec_metrics(SpecMetrics* m) { spec_ = m; }
  SpecMetrics* spec_metrics() const { return spec_; }
  void first_token(RequestState& r, double now);
  void drafting(double seconds, int64_t proposed);
  // One verification round of `r`: `verified` drafts, `accepted` of them.
  void round(const RequestState& r, int verified, int accepted);

 private:
  void export_finished(RequestState& r);

  const ModelConfig& cfg_;
  const EngineOptions& opt_;
  int K_ = 0;
  EngineMetrics live_;
  SpecMetrics* spec_ = nullptr;
};

}  // namespace dspark
