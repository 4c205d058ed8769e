#include "runtime/model_runner.h"

#include <malloc.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "spec_decode/verify.h"

namespace dspark {

namespace {

// Random streams of a request: keyed by its seed, the stream kind and the position of the round's
// anchor, so a draw never depends on what else ran before it or beside it.
enum StreamKind : uint64_t { kDraftStream = 1, kAcceptStream = 2, kResidualStream = 3 };
Rng position_rng(uint64_t seed, StreamKind kind, int anchor_pos) {
  return Rng(seed, uint64_t(anchor_pos) * 4 + kind);
}

}  // namespace

int speculation_length(const Drafter* drafter, const SpecConfig& spec) {
  if (!drafter) return 0;
  return spec.num_speculative_tokens > 0 ? spec.num_speculative_tokens
                                         : drafter->max_draft_tokens();
}

ModelRunner::ModelRunner(Forward& fwd, const EngineOptions& opt, std::unique_ptr<Drafter> own,
                         Drafter* drafter, const SpecConfig& spec, VerifyLengthPolicy* policy,
                         OutputProcessor& out)
    : fwd_(fwd),
      kv_(fwd.kv()),
      cfg_(fwd.model().config()),
      opt_(opt),
      out_(out),
      spec_(spec),
      policy_(policy) {
  if (own) drafter = own.get();
  if (drafter) {
    drafters_.push_back(std::make_unique<DrafterVersion>());
    drafters_.back()->own = std::move(own);
    drafter_ = drafters_.back()->d = drafter;
    tap_layers_ = drafter_->target_layers();
    if (opt_.enable_prefix_caching) drafter_->enable_prefix_caching();
  }
  drafter_taps_ = int(tap_layers_.size());
  for (int l : opt_.export_layers) {
    if (l < -1 || l >= cfg_.num_layers)
      fail("hidden-state export: layer ", l, " is outside the target's layers -1 .. ",
           cfg_.num_layers - 1);
    auto it = std::find(tap_layers_.begin(), tap_layers_.end(), l);
    if (it == tap_layers_.end()) it = tap_layers_.insert(tap_layers_.end(), l);
    export_slot_.push_back(int(it - tap_layers_.begin()));
  }
}

void ModelRunner::install_drafter(std::unique_ptr<Drafter> d, int version) {
  auto v = std::make_unique<DrafterVersion>();
  v->own = std::move(d);
  v->d = v->own.get();
  v->version = version;
  drafters_.push_back(std::move(v));
  drafter_ = drafters_.back()->d;
  if (opt_.enable_prefix_caching) drafter_->enable_prefix_caching();
}

void ModelRunner::free_unused_drafters() {
  bool freed = false;
  for (size_t i = 0; i + 1 < drafters_.size();)
    if (drafters_[i]->users == 0) {
      drafters_.erase(drafters_.begin() + ptrdiff_t(i));
      freed = true;
    } else {
      ++i;
    }
  // A drafter's load allocated its temporaries and state on an HTTP handler thread's arena; what
  // that left free between live blocks would stay resident, a few MB a reload under an online
  // trainer's reloads for weeks. Hand the free pages of every arena back (a few ms, once a reload).
  if (freed) malloc_trim(0);
}

void ModelRunner::admitted(RequestState& r) {
  if (!drafter_) return;
  if (policy_) policy_->request_admitted();
  if (!r.dv) {
    r.dv = drafters_.back().get();
    ++r.dv->users;
  }
  r.draft_seq = r.dv->d->begin();
}

namespace {
// Whether r's tokens [0, end) are tokens[0, end).
bool same_prefix(const RequestState& r, std::span<const int32_t> tokens, int end) {
  for (int p = 0; p < end; ++p)
    if (r.token_at(p) != tokens[size_t(p)]) return false;
  return true;
}
}  // namespace

bool ModelRunner::defers_context() const {
  return drafter_ &&
         (drafter_->method() == SpecMethod::DSpark || drafter_->method() == SpecMethod::DFlash);
}

int ModelRunner::held_cap(int dwidth) const {
  return int(std::max<size_t>(kHeldRows, kHeldBytes / (size_t(std::max(1, dwidth)) * 4)));
}

int ModelRunner::prefix_attached(RequestState& r, std::span<const int32_t> tokens, int n) {
  if (!drafter_) return n;
  int m = std::min(n, r.dv->d->attach_prefix(r.draft_seq, tokens, n));
  if (!defers_context() || m >= n) return m;
  // The drafter's context lags the target's cache where rows were held and not given to it:
  // parked by a request that ended (a chat's previous turn), or held by one still running (a
  // shared document, another choice of the same prompt). The first become this request's held
  // rows; the second go to the drafter now, into its prefix cache, and the attach is tried again.
  if (const int end = unpark(r, tokens, m, n); end > m) return end;
  flush_rows_.clear();
  for (RequestState* h : holders_)
    if (h != &r && h->dv == r.dv && h->held_pos <= m &&
        same_prefix(*h, tokens, std::min(n, h->held_pos + int(h->committed.size()))))
      flush_rows_.push_back(h);
  if (flush_rows_.empty()) return m;
  flush_held(flush_rows_);
  r.dv->d->end(r.draft_seq);
  r.draft_seq = r.dv->d->begin();
  m = std::min(n, r.dv->d->attach_prefix(r.draft_seq, tokens, n));
  return std::max(m, unpark(r, tokens, m, n));
}

namespace {
// FNV-1a over token ids.
uint64_t hash_tokens(uint64_t h, int32_t t) {
  for (int i = 0; i < 4; ++i) h = (h ^ ((uint32_t(t) >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  return h;
}
constexpr uint64_t kHashSeed = 0xcbf29ce484222325ull;
}  // namespace

void ModelRunner::park(RequestState& r) {
  const int rows = int(r.committed.size());
  if (!opt_.enable_prefix_caching || rows < kParkMin || !defers_context() || r.held_width == 0)
    return;
  Parked p;
  p.version = r.dv->version;
  p.start = r.held_pos;
  p.width = r.held_width;
  p.rows = rows;
  p.prefix_hash = kHashSeed;
  for (int i = 0; i < r.held_pos; ++i) p.prefix_hash = hash_tokens(p.prefix_hash, r.token_at(i));
  // The request's own rows, moved: a copy cost about 0.2 ms a step at 16 requests on the 2-core
  // Zen 5 (a request of 100-200 rows ends every few steps).
  p.feats = std::move(r.held_feats);
  p.tokens = std::move(r.committed);
  parked_bytes_ += p.bytes();
  const size_t cap = parked_cap(p.width);
  parked_.push_back(std::move(p));
  while (parked_bytes_ > cap || parked_.size() > kParkedEntries) {
    parked_bytes_ -= parked_.front().bytes();
    parked_.pop_front();
  }
}

size_t ModelRunner::parked_cap(int width) const {
  const size_t kv_positions = size_t(kv_.total_blocks()) * size_t(kKvBlock);
  return std::max(kParkedBytes, kv_positions * size_t(std::max(width, 0)) * sizeof(float));
}

int ModelRunner::unpark(RequestState& r, std::span<const int32_t> tokens, int m, int n) {
  for (size_t e = parked_.size(); e-- > 0;) {
    Parked& p = parked_[e];
    const int end = std::min(n, p.start + p.rows);
    if (p.version != r.dv->version || p.start > m || end <= m) continue;
    const int32_t* toks = p.tokens.data();
    bool same = true;
    for (int i = p.start; i < end && same; ++i) same = tokens[size_t(i)] == toks[i - p.start];
    uint64_t h = kHashSeed;
    for (int i = 0; i < p.start && same; ++i) h = hash_tokens(h, tokens[size_t(i)]);
    if (!same || h != p.prefix_hash) continue;
    const int skip = m - p.start, rows = end - m;
    if (end == p.start + p.rows) {
      // r continues the whole entry (a chat's next turn, a preempted request): its rows become
      // r's held rows without a copy; r parks them again, with its own rows after, when it ends.
      parked_bytes_ -= p.bytes();
      r.committed = std::move(p.tokens);
      r.committed.erase(r.committed.begin(), r.committed.begin() + skip);
      r.held_feats = std::move(p.feats);
      r.held_feats.drop_front(skip);
      parked_.erase(parked_.begin() + std::ptrdiff_t(e));
    } else {  // part of it (a second question about a document): the entry stays for others
      r.committed.assign(toks + skip, toks + skip + rows);
      r.held_feats.clear();
      r.held_feats.append_rows_of(p.feats, skip, rows);
    }
    r.held_width = p.width;
    r.held_pos = m;
    r.held_last = 0;
    holders_.push_back(&r);
    return end;
  }
  return m;
}

void ModelRunner::hold(RequestState& r, std::span<const int32_t> tokens, int pos,
                       const float* feats, int64_t stride, int dwidth) {
  if (r.committed.empty()) {
    r.held_pos = pos;
    holders_.push_back(&r);
  } else if (r.held_pos + int(r.committed.size()) != pos) {
    fail("model runner: rows held from ", r.held_pos, " (", r.committed.size(),
         ") cannot take position ", pos);
  }
  r.committed.insert(r.committed.end(), tokens.begin(), tokens.end());
  r.held_width = feats ? dwidth : 0;
  if (!feats) return;
  if (!pool_) pool_ = std::make_unique<FeaturePool>(dwidth);
  if (pool_->width() != dwidth)
    fail("model runner: feature rows of ", dwidth, " floats for a pool of ", pool_->width());
  r.held_feats.append(*pool_, feats, stride, int(tokens.size()));
}

void ModelRunner::drop_holder(RequestState& r) {
  auto it = std::find(holders_.begin(), holders_.end(), &r);
  if (it != holders_.end()) holders_.erase(it);
}

void ModelRunner::released(RequestState& r) {
  if (r.draft_seq >= 0) {
    park(r);
    r.dv->d->end(r.draft_seq);
  }
  drop_holder(r);
  r.draft_seq = -1;
  r.committed.clear();
  r.held_feats.clear();  // (moved out by park(), or its pages go back to the pool)
  r.held_last = 0;
  r.export_bytes.clear();
  r.export_rows = 0;
}

bool ModelRunner::propose(const StepPlan& plan) {
  const std::vector<RequestState*>& dec = plan.decode;
  // The policy may judge, from past rounds, that no round with drafts can beat a plain step now.
  if (policy_ && !dec.empty()) {
    positions_.clear();
    for (RequestState* r : dec) positions_.push_back(r->anchor_pos());
    policy_->set_contexts(positions_);
  }
  const bool draft_now = drafter_ && !dec.empty() && policy_->should_draft(int(dec.size()));
  if (drafter_ && !dec.empty() && !draft_now) ++out_.metrics().spec_plain_steps;
  catch_up_ = {};
  if (!draft_now) {
    for (RequestState* r : dec) {
      r->draft.clear();
      r->verify_len = 0;
    }
    return false;
  }
  const double t0 = now_seconds();
  for (RequestState* r : dec) r->draft.clear();
  catch_up_ = flush_held(dec);  // the drafter's context must be complete before it drafts
  for (auto& v : drafters_) {   // one batched pass per drafter version (one but after a reload)
    jobs_.clear();
    for (RequestState* r : dec) {
      if (r->want <= 0 || r->dv != v.get()) continue;
      const int pos = r->anchor_pos();
      r->draft_rng = position_rng(r->req.params.sampling.seed, kDraftStream, pos);
      DraftSampling ds{spec_.draft_sample == DraftSampleMethod::Probabilistic,
                       r->req.params.sampling, &r->draft_rng, r->processor.get()};
      jobs_.push_back(DraftJob{r->draft_seq, r->anchor, pos, r->want, ds, &r->draft});
    }
    if (!jobs_.empty()) v->d->propose_batch(jobs_);
  }
  for (RequestState* r : dec)  // the drafts a drafter pushed were tries
    if (r->processor) r->processor->pop_to(r->out_tokens.size());
  draft_ptrs_.clear();
  int64_t proposed = 0;
  for (RequestState* r : dec) {
    proposed += int64_t(r->draft.tokens.size());
    draft_ptrs_.push_back(&r->draft);
  }
  lengths_.assign(dec.size(), 0);
  policy_->choose(draft_ptrs_, lengths_);
  // A catch-up is not paid by every round: left out of the drafting cost the policy learns (its
  // prompt part also out of the step's time, step_delivered; catch_up_ says why).
  const double drafting = now_seconds() - t0;
  policy_->observe_drafting(drafting - catch_up_.total(), int(dec.size()));
  out_.drafting(drafting, proposed);
  for (size_t i = 0; i < dec.size(); ++i)
    dec[i]->verify_len = std::clamp(lengths_[i], 0, int(dec[i]->draft.tokens.size()));
  return true;
}

// One flat batch. Output rows: prefill rows that are not a prompt's last (taps only), prefill
// rows of prompts being scored (prompt_logprobs; every row but the last, with logits), then the
// last rows of prompts that complete, then every decode row; logits for the last three groups.
void ModelRunner::build_batch(const StepPlan& plan) {
  const bool taps = !tap_layers_.empty();  // the drafter's features, the export's, or both
  batch_.clear();
  tail_rows_.clear();
  decode_rows_.clear();
  score_rows_.clear();
  for (RequestState* r : plan.prefill) {
    const bool completes = r->computed + r->chunk == r->target_len;
    const bool scored = r->scores_prompt();
    // A scored prompt's rows are numbered among the scored rows here, placed after the others
    // below.
    r->out_row = scored ? int(score_rows_.size()) : taps ? int(batch_.output_rows.size()) : -1;
    for (int i = 0; i < r->chunk; ++i) {
      const int pos = r->computed + i;
      const bool last = completes && i + 1 == r->chunk;
      batch_.add(r->token_at(pos), pos, r->kv_seq, false);
      const int32_t row = int32_t(batch_.size() - 1);
      if (last)
        tail_rows_.push_back(row);
      else if (scored)
        score_rows_.push_back(row);
      else if (taps)
        batch_.output_rows.push_back(row);
    }
  }
  const int unscored = int(batch_.output_rows.size());
  for (RequestState* r : plan.prefill)
    if (r->scores_prompt()) r->out_row += unscored;
  batch_.output_rows.insert(batch_.output_rows.end(), score_rows_.begin(), score_rows_.end());
  n_head_ = int(batch_.output_rows.size());
  for (RequestState* r : plan.decode) {
    const int pos = r->anchor_pos();
    batch_.add(r->anchor, pos, r->kv_seq, false);
    decode_rows_.push_back(int32_t(batch_.size() - 1));
    for (int i = 0; i < r->verify_len; ++i) {
      batch_.add(r->draft.tokens[size_t(i)], pos + 1 + i, r->kv_seq, false);
      decode_rows_.push_back(int32_t(batch_.size() - 1));
    }
  }
  batch_.output_rows.insert(batch_.output_rows.end(), tail_rows_.begin(), tail_rows_.end());
  batch_.output_rows.insert(batch_.output_rows.end(), decode_rows_.begin(), decode_rows_.end());
}

void ModelRunner::execute(const StepPlan& plan, bool drafted, double t_step) {
  build_batch(plan);
  ForwardRequest req;
  if (!tap_layers_.empty()) req.tap_layers = tap_layers_;
  req.logits_last = int(score_rows_.size() + tail_rows_.size() + decode_rows_.size());
  req.logits = req.logits_last > 0;
  EngineMetrics& m = out_.metrics();
  const double t_fwd = now_seconds();
  const ForwardOutput& out = fwd_.run(batch_, req);
  m.forward_seconds += now_seconds() - t_fwd;
  ++m.steps;
  prefill_results(plan, out);
  verify_and_commit(plan, out);
  // Backbone drafters (DSpark, DFlash) are given a prompt's rows and those of plain steps when
  // they next draft, in one pass (8 rows cost about 2.6 single rows on 2 AVX2 cores), or once
  // a request holds held_cap() rows; a request that never drafts (plain steps under load) costs
  // the drafter nothing, and with prefix caching its rows are parked when it ends. The others
  // take the rows after every step.
  if (drafter_) {
    const bool defer = defers_context();
    flush_rows_.clear();
    for (const std::vector<RequestState*>* list : {&plan.prefill, &plan.decode})
      for (RequestState* r : *list)
        if (!r->committed.empty() &&
            (!defer || int(r->committed.size()) >= held_cap(r->held_width)))
          flush_rows_.push_back(r);
    flush_held(flush_rows_);
  }
  m.step_seconds += now_seconds() - t_step;
  seen_.reset();
  if (policy_ && !plan.decode.empty()) {
    int emitted = 0;
    for (RequestState* r : plan.decode) emitted += int(r->pending.token_ids.size());
    seen_ = StepSeen{int(plan.decode.size()), emitted, int(decode_rows_.size()),
                     plan.prefill_tokens,     drafted, t_step};
  }
  if (SpecMetrics* sm = out_.spec_metrics()) sm->verify_seconds += now_seconds() - t_fwd;
}

void ModelRunner::step_delivered() {
  if (!seen_) return;
  const StepSeen& s = *seen_;
  policy_->observe_step(s.requests, s.drafted, s.emitted,
                        now_seconds() - s.t_step - catch_up_.prompt, s.rows, s.other_rows,
                        catch_up_.plain);
  seen_.reset();
}

// Prefill results: the drafter's context, and the first token of prompts that completed.
void ModelRunner::prefill_results(const StepPlan& plan, const ForwardOutput& out) {
  const int V = cfg_.vocab_size;
  const int width = out.n_taps * out.hidden;      // a row of taps
  const int dwidth = drafter_taps_ * out.hidden;  // the drafter's features: a row's first floats
  const bool dtaps = drafter_taps_ > 0;
  int tail_i = 0;
  for (RequestState* r : plan.prefill) {
    const bool completes = r->computed + r->chunk == r->target_len;
    // Row i of the chunk: the head rows in order, the prompt's last among the tail rows.
    const int head_rows = completes ? r->chunk - 1 : r->chunk;
    auto out_row_of = [&](int i) { return i < head_rows ? r->out_row + i : n_head_ + tail_i; };
    if (r->req.export_hidden)
      for (int i = 0; i < r->chunk; ++i) capture_row(*r, out, out_row_of(i), r->computed + i);
    if (r->scores_prompt())  // row i predicts the token at the next position
      for (int i = 0; i < r->chunk; ++i)
        out_.score_prompt(*r, r->computed + i + 1, out.logits_row(out_row_of(i)));
    committed_.resize(size_t(r->chunk));
    for (int i = 0; i < r->chunk; ++i) committed_[size_t(i)] = r->token_at(r->computed + i);
    kv_.commit(r->kv_seq, r->computed, committed_);
    if (drafter_ && defers_context()) {
      // Taken when it first drafts (a catch-up: held_last stays 0), straight from the taps: the
      // head rows are consecutive, the last is among the tail rows.
      const std::span<const int32_t> toks(committed_);
      auto taps_at = [&](int i) {
        return dtaps ? out.taps + int64_t(out_row_of(i)) * width : nullptr;
      };
      if (head_rows > 0)
        hold(*r, toks.first(size_t(head_rows)), r->computed, taps_at(0), width, dwidth);
      if (head_rows < r->chunk)
        hold(*r, toks.subspan(size_t(head_rows)), r->computed + head_rows, taps_at(head_rows),
             width, dwidth);
    } else if (drafter_) {
      const float* feats = nullptr;
      if (dtaps) {
        gathered_.resize(size_t(r->chunk) * size_t(dwidth));
        for (int i = 0; i < r->chunk; ++i)
          std::memcpy(gathered_.data() + int64_t(i) * dwidth,
                      out.taps + int64_t(out_row_of(i)) * width, size_t(dwidth) * 4);
        feats = gathered_.data();
      }
      r->dv->d->extend(r->draft_seq, committed_, r->computed,
                       TargetFeatures{feats, dtaps ? r->chunk : 0, dwidth});
      out_.metrics().drafter_context_rows += r->chunk;
    }
    r->computed += r->chunk;
    if (!completes) continue;
    const int out_row = n_head_ + tail_i++;
    r->decoding = true;
    if (r->out_tokens.empty()) {
      // As vLLM counts them: at the first token, cached or not.
      out_.metrics().prompt_tokens += r->prompt_len();
      if (r->req.params.prompt_logprobs >= 0) {
        r->pending.prompt_logprobs = std::move(r->prompt_lp);
        r->prompt_lp_sent = true;
      }
      out_.first_token(*r, now_seconds());
      if (r->max_tokens == 0) {  // the prompt scored, nothing to generate
        out_.finish(*r, "length");
        continue;
      }
      Rng rng = position_rng(r->req.params.sampling.seed, kResidualStream, r->target_len - 1);
      const float* logits = out.logits_row(out_row);
      const int32_t tok =
          sampler_.sample(processed_rows(*r, logits, {}), V, r->req.params.sampling, rng);
      if (out_.emit(*r, tok, logits)) r->anchor = tok;
    } else {
      r->anchor = r->out_tokens.back();  // recomputed after preemption: already emitted
    }
  }
}

// Verifies every decoding request, commits, holds the drafter's new rows.
void ModelRunner::verify_and_commit(const StepPlan& plan, const ForwardOutput& out) {
  const int V = cfg_.vocab_size;
  const int width = out.n_taps * out.hidden;
  const int dwidth = drafter_taps_ * out.hidden;
  const bool dtaps = drafter_taps_ > 0;
  int row = n_head_ + int(tail_rows_.size());
  for (RequestState* r : plan.decode) {
    const int pos = r->anchor_pos();
    const int l = r->verify_len;
    const int r0 = row;
    row += 1 + l;
    const SamplingParams& sp = r->req.params.sampling;
    VerifyResult vr;
    const std::span<const int32_t> drafts(r->draft.tokens.data(), size_t(l));
    // Row i is the distribution after the drafts before it (rows are consecutive, V apart).
    const float* rows = processed_rows(*r, out.logits_row(r0), drafts);
    if (!drafter_) {
      Rng rng = position_rng(sp.seed, kResidualStream, pos);
      vr.next_token = sampler_.sample(rows, V, sp, rng);
    } else if (sp.greedy()) {
      vr = verify_greedy_logits(drafts, rows, V, V);
    } else {
      probs_.resize(size_t(V) * size_t(l + 1));
      for (int i = 0; i <= l; ++i)
        sampler_.dense(rows + int64_t(i) * V, V, sp, probs_.data() + int64_t(i) * V);
      Rng accept = position_rng(sp.seed, kAcceptStream, pos),
          residual = position_rng(sp.seed, kResidualStream, pos);
      const VerifyInput vin{V, drafts, r->draft.q.empty() ? nullptr : r->draft.q.data(),
                            probs_.data()};
      vr = verify(spec_.rejection, false, vin, VerifyRng{&accept, &residual});
    }
    if (drafter_) out_.round(*r, l, vr.accepted);
    kv_.truncate(r->kv_seq, pos + vr.accepted + 1);
    bool go = true;
    const size_t out_before = r->out_tokens.size();
    // Each token's logprobs come from the row that predicted it: the anchor's row for the first
    // draft, draft i's row for draft i + 1, the last accepted one's for the bonus/corrected token.
    for (int i = 0; i < vr.accepted && go; ++i)
      go = out_.emit(*r, r->draft.tokens[size_t(i)], out.logits_row(r0 + i));
    if (go) go = out_.emit(*r, vr.next_token, out.logits_row(r0 + vr.accepted));
    if (r->req.export_hidden)  // the rows of the emitted tokens' inputs: the anchor, then drafts
      for (int i = 0; i < int(r->out_tokens.size() - out_before); ++i)
        capture_row(*r, out, r0 + i, pos + i);
    if (go) {
      committed_.assign(1, r->anchor);
      committed_.insert(committed_.end(), r->draft.tokens.begin(),
                        r->draft.tokens.begin() + vr.accepted);
      if (drafter_) {  // held for the drafter, then given to it for many requests at once
        hold(*r, committed_, pos, dtaps ? out.taps + int64_t(r0) * width : nullptr, width, dwidth);
        r->held_last = 1 + vr.accepted;
      }
      if (kv_.prefix_caching()) kv_.commit(r->kv_seq, pos, committed_);
      r->anchor = vr.next_token;
      r->computed = pos + vr.accepted + 1;
    }
  }
}

const float* ModelRunner::processed_rows(RequestState& r, const float* logits,
                                         std::span<const int32_t> drafts) {
  if (!r.processor) return logits;
  const int64_t V = cfg_.vocab_size;
  const int n = int(drafts.size()) + 1;
  processed_.resize(size_t(n) * size_t(V));
  LogitsProcessor& lp = *r.processor;
  const size_t depth = lp.depth();
  const bool wrong = testing::processor_ignores_drafts();
  for (int i = 0; i < n; ++i) {
    float* row = processed_.data() + i * V;
    std::memcpy(row, logits + i * V, size_t(V) * sizeof(float));
    lp.apply(row);
    if (i + 1 < n && !wrong) lp.push(drafts[size_t(i)]);
  }
  lp.pop_to(depth);
  return processed_.data();
}

ModelRunner::CatchUp ModelRunner::flush_held(std::span<RequestState* const> rs) {
  int64_t rows = 0, prompt = 0, plain = 0;
  for (RequestState* r : rs) {
    const int n = int(r->committed.size());
    rows += n;
    const int older_end = r->held_pos + std::max(0, n - r->held_last);  // rows before the last step
    const int split = std::clamp(r->prompt_len(), r->held_pos, older_end);
    prompt += split - r->held_pos;
    plain += older_end - split;
  }
  if (rows == 0) return {};
  const double t0 = now_seconds();
  // Rows that span pages are copied to one array for the drafter, every request's in turn.
  if (pool_) flushed_.resize(size_t(rows) * size_t(pool_->width()));
  for (auto& v : drafters_) {
    accepts_.clear();
    size_t at = 0;
    for (RequestState* r : rs) {
      if (r->committed.empty() || r->draft_seq < 0 || r->dv != v.get()) continue;
      const int rows = int(r->committed.size());
      TargetFeatures f{nullptr, 0, r->held_width};
      if (r->held_width) {
        f = {r->held_feats.contiguous(flushed_.data() + at), rows, r->held_width};
        at += size_t(rows) * size_t(r->held_width);
      }
      accepts_.push_back(AcceptJob{r->draft_seq, r->committed, r->held_pos, f});
    }
    if (!accepts_.empty()) v->d->accept_batch(accepts_);
  }
  for (RequestState* r : rs) {
    r->committed.clear();
    r->held_feats.clear();
    drop_holder(*r);
  }
  out_.metrics().drafter_context_rows += rows;
  const double per_row = (now_seconds() - t0) / double(rows);
  return {per_row * double(prompt), per_row * double(plain)};
}

void ModelRunner::capture_row(RequestState& r, const ForwardOutput& out, int out_row, int pos) {
  if (pos != r.export_rows) return;  // kept already (or out of order: export_finished reports it)
  const int H = out.hidden;
  const size_t per = opt_.export_bf16 ? 2 : 4, n = export_slot_.size() * size_t(H);
  const size_t at = r.export_bytes.size();
  r.export_bytes.resize(at + n * per);
  char* dst = r.export_bytes.data() + at;
  for (size_t k = 0; k < export_slot_.size(); ++k) {
    const float* src = out.tap(out_row, export_slot_[k]);
    if (opt_.export_bf16)
      convert_f32_to_bf16(src, reinterpret_cast<uint16_t*>(dst) + k * size_t(H), size_t(H));
    else
      std::memcpy(dst + k * size_t(H) * 4, src, size_t(H) * 4);
  }
  ++r.export_rows;
}

}  // namespace dspark
