#include "runtime/output_processor.h"

#include <algorithm>
#include <string_view>

namespace dspark {

OutputProcessor::OutputProcessor(const ModelConfig& cfg, const EngineOptions& opt, int K)
    : cfg_(cfg), opt_(opt), K_(K) {}

void OutputProcessor::finish(RequestState& r, const char* reason) {
  if (r.finished) return;
  r.finished = true;
  r.aborted = std::string_view(reason) == "abort";
  if (!r.stops.stopped()) {
    std::string tail = r.stops.push(r.decoder.flush());
    if (!r.stops.stopped())
      tail += r.stops.flush();
    else
      reason = "stop";
    r.pending.text += tail;
  }
  if (r.stops.stopped() && r.pending.stop_token < 0) r.pending.stop_string = r.stops.matched();
  r.pending.finished = true;
  r.pending.finish_reason = reason;
  r.has_pending = true;
}

bool OutputProcessor::emit(RequestState& r, int32_t token, const float* logits) {
  if (r.req.params.logprobs >= 0 && logits)
    append_logprobs(logits, cfg_.vocab_size, token, r.req.params.logprobs, r.pending.logprobs);
  r.out_tokens.push_back(token);
  if (r.processor) r.processor->push(token);
  r.pending.token_ids.push_back(token);
  r.has_pending = true;
  ++live_.generation_tokens;
  const auto& ids = r.req.params.stop_token_ids;
  if (std::find(ids.begin(), ids.end(), token) != ids.end()) {
    const auto& eos = cfg_.eos_token_ids;
    if (std::find(eos.begin(), eos.end(), token) == eos.end()) r.pending.stop_token = token;
    finish(r, "stop");
    return false;
  }
  r.pending.text += r.stops.push(r.decoder.push(token));
  if (r.stops.stopped()) {
    finish(r, "stop");
    return false;
  }
  if (int(r.out_tokens.size()) >= r.max_tokens) {
    finish(r, "length");
    return false;
  }
  return true;
}

void OutputProcessor::score_prompt(RequestState& r, int pos, const float* logits) {
  if (r.prompt_lp_sent || pos != int(r.prompt_lp.size()) + 1 || pos >= r.prompt_len()) return;
  append_logprobs(logits, cfg_.vocab_size, r.req.prompt[size_t(pos)], r.req.params.prompt_logprobs,
                  r.prompt_lp);
}

void OutputProcessor::deliver(RequestQueue& q, RequestQueue& done, double now) {
  for (auto& r : q) {
    if (!r->has_pending) continue;
    RequestOutput o = std::move(r->pending);
    r->pending = RequestOutput{};
    r->has_pending = false;
    o.prompt_tokens = r->prompt_len();
    o.completion_tokens = int(r->out_tokens.size());
    o.cached_tokens = std::max(0, r->cached_tokens);
    if (!o.token_ids.empty()) {
      if (r->last_emit >= 0) live_.itl.observe(now - r->last_emit);
      r->last_emit = now;
    }
    if (o.finished) {
      live_.e2e.observe(now - r->arrival);
      ++live_.request_success[o.finish_reason];
    }
    if (r->on_output) r->on_output(std::move(o));
  }
  for (auto& r : q)
    if (r->finished) {
      if (r->req.export_hidden && opt_.on_export) export_finished(*r);
      done.push_back(std::move(r));
    }
  q.erase(std::remove(q.begin(), q.end(), nullptr), q.end());
}

void OutputProcessor::export_finished(RequestState& r) {
  if (r.aborted) return;  // nobody was given its handle
  HiddenExport e;
  e.handle = r.req.export_handle;
  e.request_id = r.req.request_id;
  e.prompt_tokens = r.prompt_len();
  e.output_tokens = int(r.out_tokens.size());
  e.layers = opt_.export_layers;
  e.hidden = cfg_.hidden_size;
  e.bf16 = opt_.export_bf16;
  const int n = r.prompt_len() + (r.req.export_output_tokens ? e.output_tokens - 1 : 0);
  if (r.export_rows < n) {
    e.error = "captured the hidden states of " + std::to_string(r.export_rows) + " of " +
              std::to_string(n) + " positions";
  } else {
    e.token_ids.reserve(size_t(n));
    for (int p = 0; p < n; ++p) e.token_ids.push_back(r.token_at(p));
    const size_t row = r.export_bytes.size() / size_t(r.export_rows);
    r.export_bytes.resize(row * size_t(n));
    e.bytes = std::move(r.export_bytes);
  }
  opt_.on_export(std::move(e));
}

void OutputProcessor::first_token(RequestState& r, double now) {
  r.first_token = now;
  live_.ttft.observe(now - r.arrival);
}

void OutputProcessor::drafting(double seconds, int64_t proposed) {
  live_.spec_proposed += proposed;
  live_.draft_seconds += seconds;
  if (spec_) {
    spec_->draft_seconds += seconds;
    spec_->proposed += proposed;
  }
}

void OutputProcessor::round(const RequestState& r, int l, int accepted) {
  if (l > 0) {
    ++live_.spec_num_drafts;
    live_.spec_num_draft_tokens += l;
    live_.spec_num_accepted_tokens += accepted;
    for (int i = 0; i < accepted; ++i) ++live_.spec_num_accepted_tokens_per_pos[size_t(i)];
    EngineMetrics::PerDrafter& pd = live_.per_drafter(r.dv->version);
    ++pd.drafts;
    pd.draft_tokens += l;
    pd.accepted_tokens += accepted;
  }
  ++live_.spec_verify_length_hist[size_t(l)];
  if (SpecMetrics* m = spec_) {
    ++m->rounds;
    m->drafted += l;
    m->accepted += accepted;
    if (m->verified_at.size() < size_t(K_)) {
      m->verified_at.resize(size_t(K_));
      m->accepted_at.resize(size_t(K_));
    }
    for (int i = 0; i < l; ++i) {
      ++m->verified_at[size_t(i)];
      if (i < accepted) ++m->accepted_at[size_t(i)];
    }
    if (m->record_rounds && !r.draft.confidence_logit.empty())
      m->round_records.push_back(RoundRecord{
          std::vector<float>(r.draft.confidence_logit.begin(), r.draft.confidence_logit.begin() + l),
          accepted});
  }
}

}  // namespace dspark
