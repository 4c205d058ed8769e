#include "runtime/request_scheduler.h"

#include <algorithm>

namespace dspark {

RequestScheduler::RequestScheduler(SchedulerConfig cfg, KvCache& kv, SchedulerHooks& hooks)
    : cfg_(cfg), kv_(kv), hooks_(hooks) {}

double RequestScheduler::kv_usage() const {
  return kv_.total_blocks() ? 1.0 - double(kv_.free_blocks()) / double(kv_.total_blocks()) : 0.0;
}

void RequestScheduler::release(RequestState& r) {
  if (r.kv_seq >= 0) kv_.free_sequence(r.kv_seq);
  r.kv_seq = -1;
  hooks_.released(r);
  r.computed = 0;
  r.decoding = false;
}

void RequestScheduler::preempt_newest() {
  RequestState& r = *running_.back();
  release(r);
  // Recompute later: everything but the anchor is prefilled again; the anchor stays emitted.
  r.target_len = r.out_tokens.empty() ? r.prompt_len() : r.anchor_pos();
  ++preemptions_;
  waiting_.insert(waiting_.begin(), std::move(running_.back()));
  running_.pop_back();
}

void RequestScheduler::attach_prefix(RequestState& r) {
  int n = 0;
  // An export needs every prompt position's hidden states, prompt_logprobs every prompt row's
  // logits: they prefill all of them.
  if (kv_.prefix_caching() && !r.req.export_hidden && r.req.params.prompt_logprobs < 0) {
    const int max_hit = (r.target_len - 1) / kKvBlock * kKvBlock;
    prefix_tokens_.clear();
    for (int p = 0; p < max_hit; ++p) prefix_tokens_.push_back(r.token_at(p));
    n = kv_.attach_prefix(r.kv_seq, prefix_tokens_, max_hit);
    if (n > 0) {
      const int d = hooks_.prefix_attached(r, std::span<const int32_t>(prefix_tokens_).first(size_t(n)), n);
      if (d < n) kv_.truncate(r.kv_seq, d);
      n = d;
    }
  }
  r.computed = n;
  if (r.cached_tokens < 0) {  // first admission
    r.cached_tokens = n;
    if (kv_.prefix_caching()) {
      prefix_queries_ += r.prompt_len();
      prefix_hits_ += n;
    }
  }
}

// Prompt chunks, oldest request first, in the step's token budget left.
void RequestScheduler::plan_prefill() {
  for (auto& rp : running_) {
    RequestState& r = *rp;
    if (r.decoding) continue;
    const int left = cfg_.max_num_batched_tokens - plan_.decode_tokens - plan_.prefill_tokens;
    if (left <= 0) break;
    r.chunk = std::min(r.target_len - r.computed, left);
    if (kv_.room_for(r.kv_seq) < r.computed + r.chunk) {
      r.chunk = 0;  // waits for room; the decode rounds free blocks as requests finish
      continue;
    }
    kv_.reserve(r.kv_seq, r.computed + r.chunk);
    plan_.prefill_tokens += r.chunk;
  }
}

const StepPlan& RequestScheduler::schedule(int K, double now) {
  plan_.prefill.clear();
  plan_.decode.clear();
  plan_.prefill_tokens = plan_.decode_tokens = 0;
  const int budget = cfg_.max_num_batched_tokens;

  // 1. Admission.
  while (!waiting_.empty() && int(running_.size()) < cfg_.max_num_seqs) {
    RequestState& r = *waiting_.front();
    const int64_t need =
        std::min<int64_t>(int64_t(r.target_len) + K + 1, int64_t(r.prompt_len()) + r.max_tokens);
    if (int64_t(kv_.free_blocks()) * kKvBlock < need) break;
    r.kv_seq = kv_.create_sequence();
    hooks_.admitted(r, now);
    attach_prefix(r);
    running_.push_back(std::move(waiting_.front()));
    waiting_.erase(waiting_.begin());
  }

  // 2. Prefill-first steps: while a prompt waits for its prefill, the step runs prompt chunks
  // only, so a new request's first token never waits behind the decoding rounds.
  for (auto& rp : running_) rp->chunk = 0;
  if (cfg_.prefill_first) plan_prefill();
  const bool decode_now = plan_.prefill_tokens == 0;

  // 3. Decoding requests: room for the anchor and `want` drafts; when the pool is short, the
  // most recently admitted request is preempted and recomputed later.
  for (size_t i = 0; decode_now && i < running_.size(); ++i) {
    RequestState& r = *running_[i];
    if (!r.decoding) continue;
    const int pos = r.anchor_pos();
    // Up to K drafts, never more than the tokens left (the last round's bonus may be cut).
    r.want = std::max(
        0, std::min({K, r.max_tokens - int(r.out_tokens.size()), cfg_.max_model_len - pos - 1}));
    r.want = std::max(0, std::min(r.want, budget - plan_.decode_tokens - 1));
    while (kv_.room_for(r.kv_seq) < pos + 1 + r.want) {
      const bool self = running_.back().get() == &r;
      preempt_newest();
      if (self) break;
    }
    if (i >= running_.size()) break;
    kv_.reserve(r.kv_seq, pos + 1 + r.want);
    plan_.decode_tokens += 1 + r.want;
  }

  // 4. Chunked prefill in the budget left.
  if (decode_now) plan_prefill();

  for (auto& rp : running_) {
    if (rp->decoding && decode_now) plan_.decode.push_back(rp.get());
    else if (!rp->decoding && rp->chunk > 0) plan_.prefill.push_back(rp.get());
  }
  // Nothing fits: only possible when the pool is fragmented by waiting prefills; preempt the
  // newest so the oldest can go on.
  if (plan_.empty() && running_.size() > 1) preempt_newest();
  return plan_;
}

}  // namespace dspark
