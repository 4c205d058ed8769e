// The request scheduler: the waiting and running queues, admission, preemption, chunked-prefill
// planning and the KV cache's block accounting. Each step it produces a plan (which requests
// prefill how many prompt tokens, which decode with up to how many drafts); it runs no model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/kv_cache.h"
#include "runtime/request_state.h"

namespace dspark {

struct SchedulerConfig {
  int max_num_seqs = 16;              // requests running at once
  int max_num_batched_tokens = 2048;  // tokens in one step
  int max_model_len = 0;              // prompt + output positions at most (resolved, > 0)
  // Steps with prompts to prefill run only those (vLLM V0's order); else chunks of prompts share
  // each step with the decoding rounds (vLLM V1's chunked prefill).
  bool prefill_first = false;
};

// One step's plan. Per request: RequestState::chunk prompt tokens for each of `prefill`,
// RequestState::want drafts at most for each of `decode` (both in the running queue's order).
struct StepPlan {
  std::vector<RequestState*> prefill, decode;
  int prefill_tokens = 0;  // sum of the chunks
  int decode_tokens = 0;   // anchors and drafts reserved: sum of 1 + want
  bool empty() const { return prefill.empty() && decode.empty(); }
};

// What the scheduler tells its owner (the engine) when a request gets or loses its place.
class SchedulerHooks {
 public:
  virtual ~SchedulerHooks() = default;
  // `r` was admitted (again, after a preemption): its KV sequence exists.
  virtual void admitted(RequestState& r, double now) = 0;
  // Prefix caching: r's KV sequence starts with n cached positions of `tokens`. Returns how many
  // of them (a whole number of KV blocks, <= n) the drafter's context holds too: r resumes there.
  virtual int prefix_attached(RequestState& r, std::span<const int32_t> tokens, int n) = 0;
  // `r` lost its place (preempted, finished or failed): its KV sequence is freed; drop whatever
  // else it holds (drafter state, held rows, captured hidden states).
  virtual void released(RequestState& r) = 0;
};

class RequestScheduler {
 public:
  RequestScheduler(SchedulerConfig cfg, KvCache& kv, SchedulerHooks& hooks);

  const SchedulerConfig& config() const { return cfg_; }
  void add(std::unique_ptr<RequestState> r) { waiting_.push_back(std::move(r)); }
  RequestQueue& waiting() { return waiting_; }
  RequestQueue& running() { return running_; }
  bool has_requests() const { return !waiting_.empty() || !running_.empty(); }

  // Plans one step in which a decoding request verifies at most K drafts:
  //  1. admission, first come first served, while the whole prompt (and one round) fits;
  //  2. with prefill_first, prompt chunks only while any prompt waits;
  //  3. room for every decoding request's anchor and drafts, preempting the most recently
  //     admitted request when the KV pool is short;
  //  4. chunked prefill in the token budget left.
  // When nothing fits (a pool fragmented by waiting prefills) the plan is empty and the newest
  // request is preempted so the oldest can go on.
  const StepPlan& schedule(int K, double now);

  // Frees `r`'s KV sequence and its other state (SchedulerHooks::released); it is to be prefilled
  // again from position 0 if it runs again.
  void release(RequestState& r);
  int64_t preemptions() const { return preemptions_; }
  int64_t prefix_queries() const { return prefix_queries_; }
  int64_t prefix_hits() const { return prefix_hits_; }
  double kv_usage() const;  // fraction of KV blocks in use

 private:
  // Frees the most recently admitted running request and puts it first in the queue, to be
  // recomputed (vLLM's order).
  void preempt_newest();
  void plan_prefill();
  // A newly admitted r starts from the longest cached prefix of its positions to prefill, leaving
  // at least its last one (whose logits give the next token).
  void attach_prefix(RequestState& r);

  SchedulerConfig cfg_;
  KvCache& kv_;
  SchedulerHooks& hooks_;
  RequestQueue waiting_, running_;
  StepPlan plan_;
  int64_t preemptions_ = 0;
  int64_t prefix_queries_ = 0, prefix_hits_ = 0;
  std::vector<int32_t> prefix_tokens_;
};

}  // namespace dspark
