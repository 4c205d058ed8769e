#include "runtime/engine.h"

#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/timer.h"
#include "runtime/context_limit.h"
#include "sample/sampler.h"
#include "spec_decode/verify.h"

namespace dspark {

namespace {

// Random streams of a request: keyed by its seed, the stream kind and the position of the round's
// anchor, so a draw never depends on what else ran before it or beside it.
enum StreamKind : uint64_t { kDraftStream = 1, kAcceptStream = 2, kResidualStream = 3 };
Rng position_rng(uint64_t seed, StreamKind kind, int anchor_pos) {
  return Rng(seed, uint64_t(anchor_pos) * 4 + kind);
}

// Drafts a round verifies at most: the config's num_speculative_tokens, else the drafter's block.
int speculation_length(const Drafter* drafter, const SpecConfig& spec) {
  if (!drafter) return 0;
  return spec.num_speculative_tokens > 0 ? spec.num_speculative_tokens : drafter->max_draft_tokens();
}

}  // namespace

struct Engine::Seq {
  Seq(uint64_t h, EngineRequest r, OutputFn fn, const Tokenizer& tok)
      : handle(h),
        req(std::move(r)),
        on_output(std::move(fn)),
        stops(req.params.stop_strings),
        decoder(tok, true) {}
  ~Seq() {
    if (dv) --dv->users;
  }

  uint64_t handle;
  EngineRequest req;
  OutputFn on_output;
  int max_tokens = 0;               // output budget
  std::vector<int32_t> out_tokens;  // generated so far
  int kv_seq = -1, draft_seq = -1;
  DrafterVersion* dv = nullptr;  // the drafter it was first admitted with (kept over preemption)
  int computed = 0;    // positions whose KV (and drafter context) exist
  int target_len = 0;  // positions to prefill before decoding
  bool decoding = false;
  bool abort_requested = false;
  bool finished = false;
  bool aborted = false;  // finished with "abort"
  int32_t anchor = -1;  // the last emitted token, not yet in the KV cache
  double arrival = 0, scheduled = -1, first_token = -1, last_emit = -1;
  StopStringFilter stops;
  StreamDecoder decoder;
  RequestOutput pending;
  bool has_pending = false;
  // This step's plan.
  int want = 0, verify_len = 0, chunk = 0, out_row = 0;
  Draft draft;
  Rng draft_rng;
  // Rows the drafter has not been given yet: committed tokens from position held_pos on, and
  // (when the drafter reads target features) their feature rows, held_width floats each.
  std::vector<int32_t> committed;
  std::vector<float> held_feats;
  int held_pos = 0, held_width = 0;
  // Export (EngineRequest::export_hidden): the export layers of positions 0 .. export_rows - 1.
  std::string export_bytes;
  int export_rows = 0;

  int prompt_len() const { return int(req.prompt.size()); }
  int anchor_pos() const { return prompt_len() + int(out_tokens.size()) - 1; }
  int32_t token_at(int pos) const {
    return pos < prompt_len() ? req.prompt[size_t(pos)] : out_tokens[size_t(pos - prompt_len())];
  }
};

Engine::Engine(const Model& model, const Tokenizer& tok, EngineOptions opt,
               std::unique_ptr<Drafter> drafter, SpecConfig spec,
               std::unique_ptr<VerifyLengthPolicy> policy)
    : model_(model),
      tok_(tok),
      opt_(opt),
      own_policy_(std::move(policy)),
      spec_(std::move(spec)) {
  if (drafter) {
    drafters_.push_back(std::make_unique<DrafterVersion>());
    drafters_.back()->own = std::move(drafter);
    drafter_ = drafters_.back()->d = drafters_.back()->own.get();
  }
  policy_ = own_policy_.get();
  const ModelConfig& c = model.config();
  max_model_len_ = resolve_max_model_len(c, opt_.max_model_len);
  const int K = speculation_length(drafter_, spec_);
  int64_t kv_tokens = opt_.kv_tokens;
  if (kv_tokens <= 0) {
    // What fits: every sequence at the full length, within a quarter of the machine's memory.
    const int64_t per_token =
        KvCache::bytes_per_token(c.num_layers, c.num_kv_heads, c.head_dim, opt_.kv_dtype);
    const int64_t want = int64_t(opt_.max_num_seqs) * (max_model_len_ + K + kKvBlock);
    const int64_t fits = physical_memory_bytes() / 4 / std::max<int64_t>(per_token, 1);
    kv_tokens = std::max<int64_t>(std::min(want, fits), max_model_len_ + K + kKvBlock);
  }
  own_kv_ =
      std::make_unique<KvCache>(c.num_layers, c.num_kv_heads, c.head_dim, opt_.kv_dtype, kv_tokens);
  own_fwd_ = std::make_unique<Forward>(model_, *own_kv_);
  kv_ = own_kv_.get();
  fwd_ = own_fwd_.get();
  init();
}

Engine::Engine(Forward& fwd, const Tokenizer& tok, EngineOptions opt, Drafter* drafter,
               SpecConfig spec, VerifyLengthPolicy* policy)
    : model_(fwd.model()),
      tok_(tok),
      opt_(opt),
      drafter_(drafter),
      spec_(std::move(spec)),
      policy_(policy),
      kv_(&fwd.kv()),
      fwd_(&fwd) {
  if (drafter_) {
    drafters_.push_back(std::make_unique<DrafterVersion>());
    drafters_.back()->d = drafter_;
  }
  max_model_len_ = resolve_max_model_len(model_.config(), opt_.max_model_len);
  init();
}

void Engine::init() {
  if (opt_.max_num_seqs < 1) fail("--max-num-seqs must be >= 1, got ", opt_.max_num_seqs);
  if (drafter_) {
    spec_.num_speculative_tokens = speculation_length(drafter_, spec_);
    if (spec_.num_speculative_tokens > drafter_->max_draft_tokens())
      fail("speculative config: num_speculative_tokens ", spec_.num_speculative_tokens,
           " is more than the drafter's ", drafter_->max_draft_tokens());
    if (!policy_) {
      own_policy_ = std::make_unique<FullBlockPolicy>();
      policy_ = own_policy_.get();
    }
  }
  const int K = drafter_ ? spec_.num_speculative_tokens : 0;
  if (opt_.max_num_batched_tokens < K + 1)
    fail("--max-num-batched-tokens ", opt_.max_num_batched_tokens, " cannot hold one round of ",
         K + 1, " tokens");
  if (drafter_) tap_layers_ = drafter_->target_layers();
  drafter_taps_ = int(tap_layers_.size());
  for (int l : opt_.export_layers) {
    if (l < -1 || l >= model_.config().num_layers)
      fail("hidden-state export: layer ", l, " is outside the target's layers -1 .. ",
           model_.config().num_layers - 1);
    auto it = std::find(tap_layers_.begin(), tap_layers_.end(), l);
    if (it == tap_layers_.end()) it = tap_layers_.insert(tap_layers_.end(), l);
    export_slot_.push_back(int(it - tap_layers_.begin()));
  }
  metrics_.spec_num_accepted_tokens_per_pos.assign(size_t(K), 0);
  if (drafter_) metrics_.drafter_version = 1;
  next_version_ = 2;
  metrics_.spec_verify_length_hist.assign(size_t(K + 1), 0);
  live_ = metrics_;
}

Engine::~Engine() {
  stop();
}

int64_t Engine::kv_capacity_tokens() const {
  return int64_t(kv_->total_blocks()) * kKvBlock;
}

uint64_t Engine::submit(EngineRequest req, OutputFn on_output) {
  if (!accepting_) fail("the server is shutting down");
  GenerateParams& p = req.params;
  p.sampling.validate();
  if (req.prompt.empty()) fail("prompt: the prompt has no tokens");
  const int vocab = model_.config().vocab_size;
  for (size_t i = 0; i < req.prompt.size(); ++i)
    if (req.prompt[i] < 0 || req.prompt[i] >= vocab)
      fail("prompt: token id ", req.prompt[i], " at index ", i, " is outside the vocabulary [0, ",
           vocab, ")");
  const int64_t n = int64_t(req.prompt.size());
  const int limit = int(std::min<int64_t>(max_model_len_, kv_capacity_tokens()));
  check_prompt_length(n, max_model_len_, kv_capacity_tokens());
  if (p.max_tokens == 0 || p.max_tokens < -1)
    fail("max_tokens: must be at least 1, got ", p.max_tokens);
  if (p.max_tokens >= 0 && n + p.max_tokens > limit)
    fail("max_tokens: this model's maximum context length is ", limit, " tokens; the prompt has ",
         n, " and max_tokens asks for ", p.max_tokens, " more (", n + p.max_tokens, " in all)");
  if (req.export_hidden && opt_.export_layers.empty())
    fail("kv_transfer_params: this server exports no hidden states (start it with a "
         "--kv-transfer-config)");
  auto s = std::make_unique<Seq>(0, std::move(req), std::move(on_output), tok_);
  s->max_tokens = s->req.params.max_tokens < 0 ? int(limit - n) : s->req.params.max_tokens;
  s->target_len = int(n);
  s->arrival = now_seconds();
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) fail("the server is shutting down");
  s->handle = next_handle_++;
  const uint64_t h = s->handle;
  incoming_.push_back(std::move(s));
  ++metrics_.num_requests_waiting;
  cv_.notify_all();
  return h;
}

void Engine::abort(uint64_t handle) {
  std::lock_guard<std::mutex> lk(mu_);
  aborts_.push_back(handle);
  cv_.notify_all();
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lk(mu_);
  return incoming_.empty() && !has_work_;
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> lk(mu_);
  return metrics_;
}

void Engine::start() {
  std::lock_guard<std::mutex> lk(mu_);
  if (thread_.joinable()) return;
  thread_ = std::thread([this] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [this] {
          return stopping_ || !incoming_.empty() || !aborts_.empty() || !running_.empty() ||
                 !waiting_.empty() || next_drafter_;
        });
        if (stopping_) return;
      }
      try {
        step();
      } catch (const std::exception& e) {
        // A failed step must not leave requests hanging: end them all, then keep serving.
        std::fprintf(stderr, "dspark engine: step failed: %s\n", e.what());
        fail_all(std::string("internal error: ") + e.what());
      }
    }
  });
}

void Engine::drain() {
  accepting_ = false;
  std::unique_lock<std::mutex> lk(mu_);
  if (!thread_.joinable()) return;
  idle_cv_.wait(lk, [this] { return incoming_.empty() && !has_work_; });
}

void Engine::stop() {
  accepting_ = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  fail_all("the server is shutting down");
}

void Engine::fail_all(const std::string& why) {
  std::vector<std::unique_ptr<Seq>> all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto* v : {&incoming_, &waiting_, &running_})
      for (auto& s : *v) all.push_back(std::move(s));
    incoming_.clear();
    waiting_.clear();
    running_.clear();
    metrics_.num_requests_running = metrics_.num_requests_waiting = 0;
    has_work_ = false;
  }
  for (auto& s : all) {
    release(*s);
    RequestOutput o;
    o.finished = true;
    o.finish_reason = "abort";
    o.error = why;
    o.prompt_tokens = s->prompt_len();
    o.completion_tokens = int(s->out_tokens.size());
    if (s->on_output) s->on_output(std::move(o));
  }
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.kv_cache_usage_perc = kv_usage();
  idle_cv_.notify_all();
}

double Engine::kv_usage() const {
  return kv_->total_blocks() ? 1.0 - double(kv_->free_blocks()) / double(kv_->total_blocks()) : 0.0;
}

void Engine::release(Seq& s) {
  if (s.kv_seq >= 0) kv_->free_sequence(s.kv_seq);
  if (s.draft_seq >= 0) s.dv->d->end(s.draft_seq);
  s.kv_seq = s.draft_seq = -1;
  s.committed.clear();
  s.held_feats.clear();
  s.export_bytes.clear();
  s.export_rows = 0;
  s.computed = 0;
  s.decoding = false;
}

void Engine::preempt_newest() {
  Seq& s = *running_.back();
  release(s);
  // Recompute later: everything but the anchor is prefilled again; the anchor stays emitted.
  s.target_len = s.out_tokens.empty() ? s.prompt_len() : s.anchor_pos();
  ++live_.num_preemptions;
  waiting_.insert(waiting_.begin(), std::move(running_.back()));
  running_.pop_back();
}

void Engine::finish(Seq& s, const char* reason) {
  if (s.finished) return;
  s.finished = true;
  s.aborted = std::string_view(reason) == "abort";
  if (!s.stops.stopped()) {
    std::string tail = s.stops.push(s.decoder.flush());
    if (!s.stops.stopped())
      tail += s.stops.flush();
    else
      reason = "stop";
    s.pending.text += tail;
  }
  if (s.stops.stopped() && s.pending.stop_token < 0) s.pending.stop_string = s.stops.matched();
  s.pending.finished = true;
  s.pending.finish_reason = reason;
  s.has_pending = true;
}

// Emits one token; returns false when the request is done.
bool Engine::emit(Seq& s, int32_t token) {
  s.out_tokens.push_back(token);
  s.pending.token_ids.push_back(token);
  s.has_pending = true;
  ++live_.generation_tokens;
  const auto& ids = s.req.params.stop_token_ids;
  if (std::find(ids.begin(), ids.end(), token) != ids.end()) {
    const auto& eos = model_.config().eos_token_ids;
    if (std::find(eos.begin(), eos.end(), token) == eos.end()) s.pending.stop_token = token;
    finish(s, "stop");
    return false;
  }
  s.pending.text += s.stops.push(s.decoder.push(token));
  if (s.stops.stopped()) {
    finish(s, "stop");
    return false;
  }
  if (int(s.out_tokens.size()) >= s.max_tokens) {
    finish(s, "length");
    return false;
  }
  return true;
}

bool Engine::step() {
  // 1. New requests and aborts.
  std::vector<uint64_t> aborts;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!incoming_.empty()) has_work_ = true;  // before incoming_ empties: drain() must not see a gap
    for (auto& s : incoming_) waiting_.push_back(std::move(s));
    incoming_.clear();
    aborts.swap(aborts_);
  }
  for (uint64_t h : aborts)
    for (auto* v : {&waiting_, &running_})
      for (auto& s : *v)
        if (s->handle == h) s->abort_requested = true;
  for (auto* v : {&waiting_, &running_})
    for (auto& s : *v)
      if (s->abort_requested) finish(*s, "abort");
  install_next_drafter();
  if (!retire()) return false;

  const double t_step = now_seconds();
  const int K = drafter_ ? spec_.num_speculative_tokens : 0;
  const int budget = opt_.max_num_batched_tokens;

  // 2. Admission, first come first served, while the whole prompt (and one round) fits.
  while (!waiting_.empty() && int(running_.size()) < opt_.max_num_seqs) {
    Seq& s = *waiting_.front();
    const int64_t need =
        std::min<int64_t>(int64_t(s.target_len) + K + 1, int64_t(s.prompt_len()) + s.max_tokens);
    if (int64_t(kv_->free_blocks()) * kKvBlock < need) break;
    s.kv_seq = kv_->create_sequence();
    if (drafter_) {
      if (!s.dv) {
        s.dv = drafters_.back().get();
        ++s.dv->users;
      }
      s.draft_seq = s.dv->d->begin();
    }
    if (s.scheduled < 0) {
      s.scheduled = t_step;
      live_.queue_time.observe(t_step - s.arrival);
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.erase(waiting_.begin());
  }

  // 3. Prefill-first steps (EngineOptions::prefill_first): while a prompt waits for its
  // prefill, the step runs prompt chunks only, so a new request's first token never waits
  // behind the decoding rounds.
  int decode_tokens = 0, prefill_tokens = 0;
  for (auto& sp : running_) sp->chunk = 0;
  auto plan_prefill = [&] {
    for (size_t i = 0; i < running_.size(); ++i) {
      Seq& s = *running_[i];
      if (s.decoding) continue;
      const int left = budget - decode_tokens - prefill_tokens;
      if (left <= 0) break;
      s.chunk = std::min(s.target_len - s.computed, left);
      if (kv_->room_for(s.kv_seq) < s.computed + s.chunk) {
        s.chunk = 0;  // waits for room; the decode rounds free blocks as requests finish
        continue;
      }
      kv_->reserve(s.kv_seq, s.computed + s.chunk);
      prefill_tokens += s.chunk;
    }
  };
  if (opt_.prefill_first) plan_prefill();
  const bool decode_now = prefill_tokens == 0;

  // 4. Decoding requests: room for the anchor and `want` drafts; when the pool is short, the most
  // recently admitted request is preempted (vLLM's order) and recomputed later. Then chunked
  // prefill in the budget left.
  for (size_t i = 0; decode_now && i < running_.size(); ++i) {
    Seq& s = *running_[i];
    if (!s.decoding) continue;
    const int pos = s.anchor_pos();
    // Up to K drafts, never more than the tokens left (the last round's bonus may be cut).
    s.want = std::max(
        0, std::min({K, s.max_tokens - int(s.out_tokens.size()), max_model_len_ - pos - 1}));
    s.want = std::max(0, std::min(s.want, budget - decode_tokens - 1));
    while (kv_->room_for(s.kv_seq) < pos + 1 + s.want) {
      const bool self = running_.back().get() == &s;
      preempt_newest();
      if (self) break;
    }
    if (i >= running_.size()) break;
    kv_->reserve(s.kv_seq, pos + 1 + s.want);
    decode_tokens += 1 + s.want;
  }
  if (decode_now) plan_prefill();

  // 5. Draft for every decoding request in one pass, then choose each request's length.
  std::vector<Seq*>& dec = dec_;
  dec.clear();
  for (auto& s : running_)
    if (s->decoding && decode_now) dec.push_back(s.get());
  // The policy may judge, from past rounds, that no round with drafts can beat a plain step now.
  if (policy_ && !dec.empty()) {
    positions_.clear();
    for (Seq* s : dec) positions_.push_back(s->anchor_pos());
    policy_->set_contexts(positions_);
  }
  const bool draft_now =
      drafter_ && !dec.empty() && policy_->should_draft(int(dec.size()));
  if (drafter_ && !dec.empty() && !draft_now) ++live_.spec_plain_steps;
  if (draft_now) {
    const double t0 = now_seconds();
    for (Seq* s : dec) s->draft.clear();
    flush_held(dec);  // the drafter's context must be complete before it drafts
    for (auto& v : drafters_) {  // one batched pass per drafter version (one but after a reload)
      jobs_.clear();
      for (Seq* s : dec) {
        if (s->want <= 0 || s->dv != v.get()) continue;
        const int pos = s->anchor_pos();
        s->draft_rng = position_rng(s->req.params.sampling.seed, kDraftStream, pos);
        DraftSampling ds{spec_.draft_sample == DraftSampleMethod::Probabilistic,
                         s->req.params.sampling, &s->draft_rng};
        jobs_.push_back(DraftJob{s->draft_seq, s->anchor, pos, s->want, ds, &s->draft});
      }
      if (!jobs_.empty()) v->d->propose_batch(jobs_);
    }
    draft_ptrs_.clear();
    int64_t proposed = 0;
    for (Seq* s : dec) {
      proposed += int64_t(s->draft.tokens.size());
      draft_ptrs_.push_back(&s->draft);
    }
    live_.spec_proposed += proposed;
    lengths_.assign(dec.size(), 0);
    policy_->choose(draft_ptrs_, lengths_);
    const double drafting = now_seconds() - t0;
    policy_->observe_drafting(drafting);
    live_.draft_seconds += drafting;
    if (spec_metrics_) {
      spec_metrics_->draft_seconds += drafting;
      spec_metrics_->proposed += proposed;
    }
    for (size_t r = 0; r < dec.size(); ++r)
      dec[r]->verify_len = std::clamp(lengths_[r], 0, int(dec[r]->draft.tokens.size()));
  } else {
    for (Seq* s : dec) {
      s->draft.clear();
      s->verify_len = 0;
    }
  }

  if (dec.empty() && prefill_tokens == 0) {
    // Nothing fits: only possible when the pool is fragmented by waiting prefills; preempt the
    // newest so the oldest can go on.
    if (running_.size() > 1) preempt_newest();
    publish_metrics();
    return true;
  }

  // 6. One flat batch. Output rows: prefill rows that are not a prompt's last (taps only), then
  // the last rows of prompts that complete, then every decode row; logits for the last two groups.
  const bool taps = !tap_layers_.empty();  // the drafter's features, the export's, or both
  const bool dtaps = drafter_taps_ > 0;
  batch_.clear();
  std::vector<int32_t>&tail_rows = tail_rows_, &decode_rows = decode_rows_;
  std::vector<Seq*>& pre = pre_;
  tail_rows.clear();
  decode_rows.clear();
  pre.clear();
  for (auto& sp : running_) {
    Seq& s = *sp;
    if (s.decoding || s.chunk == 0) continue;
    pre.push_back(&s);
    const bool completes = s.computed + s.chunk == s.target_len;
    s.out_row = taps ? int(batch_.output_rows.size()) : -1;
    for (int i = 0; i < s.chunk; ++i) {
      const int pos = s.computed + i;
      const bool last = completes && i + 1 == s.chunk;
      batch_.add(s.token_at(pos), pos, s.kv_seq, false);
      const int32_t row = int32_t(batch_.size() - 1);
      if (last)
        tail_rows.push_back(row);
      else if (taps)
        batch_.output_rows.push_back(row);
    }
  }
  const int n_head = int(batch_.output_rows.size());
  for (Seq* s : dec) {
    const int pos = s->anchor_pos();
    batch_.add(s->anchor, pos, s->kv_seq, false);
    decode_rows.push_back(int32_t(batch_.size() - 1));
    for (int i = 0; i < s->verify_len; ++i) {
      batch_.add(s->draft.tokens[size_t(i)], pos + 1 + i, s->kv_seq, false);
      decode_rows.push_back(int32_t(batch_.size() - 1));
    }
  }
  batch_.output_rows.insert(batch_.output_rows.end(), tail_rows.begin(), tail_rows.end());
  batch_.output_rows.insert(batch_.output_rows.end(), decode_rows.begin(), decode_rows.end());
  ForwardRequest req;
  if (taps) req.tap_layers = tap_layers_;
  req.logits_last = int(tail_rows.size() + decode_rows.size());
  req.logits = req.logits_last > 0;
  const double t_fwd = now_seconds();
  const ForwardOutput& out = fwd_->run(batch_, req);
  live_.forward_seconds += now_seconds() - t_fwd;
  ++live_.steps;
  const int V = model_.config().vocab_size;
  const int width = out.n_taps * out.hidden;  // a row of taps
  const int dwidth = drafter_taps_ * out.hidden;  // the drafter's features: a row's first floats
  auto logits_of = [&](int out_row) { return out.logits_row(out_row); };

  // 7a. Prefill results: drafter context, and the first token of prompts that completed.
  int tail_i = 0;
  for (Seq* s : pre) {
    const bool completes = s->computed + s->chunk == s->target_len;
    // Row i of the chunk: the head rows in order, the prompt's last among the tail rows.
    const int head_rows = completes ? s->chunk - 1 : s->chunk;
    auto out_row_of = [&](int i) { return i < head_rows ? s->out_row + i : n_head + tail_i; };
    if (s->req.export_hidden)
      for (int i = 0; i < s->chunk; ++i) capture_row(*s, out, out_row_of(i), s->computed + i);
    if (drafter_) {
      const float* feats = nullptr;
      if (dtaps) {
        gathered_.resize(size_t(s->chunk) * size_t(dwidth));
        for (int i = 0; i < s->chunk; ++i)
          std::memcpy(gathered_.data() + int64_t(i) * dwidth,
                      out.taps + int64_t(out_row_of(i)) * width, size_t(dwidth) * 4);
        feats = gathered_.data();
      }
      committed_.resize(size_t(s->chunk));
      for (int i = 0; i < s->chunk; ++i) committed_[size_t(i)] = s->token_at(s->computed + i);
      s->dv->d->extend(s->draft_seq, committed_, s->computed,
                       TargetFeatures{feats, dtaps ? s->chunk : 0, dwidth});
    }
    if (s->out_tokens.empty()) live_.prompt_tokens += s->chunk;
    s->computed += s->chunk;
    if (completes) {
      const int out_row = n_head + tail_i++;
      s->decoding = true;
      if (s->out_tokens.empty()) {
        Rng rng = position_rng(s->req.params.sampling.seed, kResidualStream, s->target_len - 1);
        const int32_t tok = sampler_.sample(logits_of(out_row), V, s->req.params.sampling, rng);
        s->first_token = now_seconds();
        live_.ttft.observe(s->first_token - s->arrival);
        if (emit(*s, tok)) s->anchor = tok;
      } else {
        s->anchor = s->out_tokens.back();  // recomputed after preemption: already emitted
      }
    }
  }

  // 7b. Verify every decoding request, commit, feed the drafter.
  int row = n_head + int(tail_rows.size());
  accepts_.clear();
  for (Seq* s : dec) {
    const int pos = s->anchor_pos();
    const int l = s->verify_len;
    const int r0 = row;
    row += 1 + l;
    const SamplingParams& sp = s->req.params.sampling;
    VerifyResult vr;
    const std::span<const int32_t> drafts(s->draft.tokens.data(), size_t(l));
    if (!drafter_) {
      Rng rng = position_rng(sp.seed, kResidualStream, pos);
      vr.next_token = sampler_.sample(logits_of(r0), V, sp, rng);
    } else if (sp.greedy()) {
      vr = verify_greedy_logits(drafts, logits_of(r0), V, V);
    } else {
      probs_.resize(size_t(V) * size_t(l + 1));
      for (int i = 0; i <= l; ++i)
        sampler_.dense(logits_of(r0 + i), V, sp, probs_.data() + int64_t(i) * V);
      Rng accept = position_rng(sp.seed, kAcceptStream, pos),
          residual = position_rng(sp.seed, kResidualStream, pos);
      const VerifyInput vin{V, drafts, s->draft.q.empty() ? nullptr : s->draft.q.data(),
                            probs_.data()};
      vr = verify(spec_.rejection, false, vin, VerifyRng{&accept, &residual});
    }
    if (drafter_) {
      if (l > 0) {
        ++live_.spec_num_drafts;
        live_.spec_num_draft_tokens += l;
        live_.spec_num_accepted_tokens += vr.accepted;
        for (int i = 0; i < vr.accepted; ++i) ++live_.spec_num_accepted_tokens_per_pos[size_t(i)];
        EngineMetrics::PerDrafter& pd = live_.per_drafter(s->dv->version);
        ++pd.drafts;
        pd.draft_tokens += l;
        pd.accepted_tokens += vr.accepted;
      }
      ++live_.spec_verify_length_hist[size_t(l)];
      if (SpecMetrics* m = spec_metrics_) {
        ++m->rounds;
        m->drafted += l;
        m->accepted += vr.accepted;
        if (m->verified_at.size() < size_t(K)) {
          m->verified_at.resize(size_t(K));
          m->accepted_at.resize(size_t(K));
        }
        for (int i = 0; i < l; ++i) {
          ++m->verified_at[size_t(i)];
          if (i < vr.accepted) ++m->accepted_at[size_t(i)];
        }
        if (m->record_rounds && !s->draft.confidence_logit.empty())
          m->round_records.push_back(
              RoundRecord{std::vector<float>(s->draft.confidence_logit.begin(),
                                             s->draft.confidence_logit.begin() + l),
                          vr.accepted});
      }
    }
    kv_->truncate(s->kv_seq, pos + vr.accepted + 1);
    bool go = true;
    const size_t out_before = s->out_tokens.size();
    for (int i = 0; i < vr.accepted && go; ++i) go = emit(*s, s->draft.tokens[size_t(i)]);
    if (go) go = emit(*s, vr.next_token);
    if (s->req.export_hidden)  // the rows of the emitted tokens' inputs: the anchor, then drafts
      for (int i = 0; i < int(s->out_tokens.size() - out_before); ++i)
        capture_row(*s, out, r0 + i, pos + i);
    if (go && drafter_) {  // held for the drafter, then given to it for many requests at once
      if (s->committed.empty()) s->held_pos = pos;
      s->committed.push_back(s->anchor);
      s->committed.insert(s->committed.end(), s->draft.tokens.begin(),
                          s->draft.tokens.begin() + vr.accepted);
      s->held_width = dtaps ? dwidth : 0;
      if (dtaps)
        for (int i = 0; i <= vr.accepted; ++i) {
          const float* f = out.taps + int64_t(r0 + i) * width;
          s->held_feats.insert(s->held_feats.end(), f, f + dwidth);
        }
    }
    if (go) {
      s->anchor = vr.next_token;
      s->computed = pos + vr.accepted + 1;
    }
  }
  // Backbone drafters (DSpark, DFlash) are given the rows of plain steps when they next draft,
  // several steps' rows in one pass (8 rows cost about 2.6 single rows on 2 AVX2 cores), or
  // once kHeldRows are held; the others take them after every step.
  if (drafter_) {
    const bool defer = drafter_->method() == SpecMethod::DSpark || drafter_->method() == SpecMethod::DFlash;
    flush_rows_.clear();
    for (Seq* s : dec)
      if (!s->committed.empty() && (!defer || int(s->committed.size()) >= kHeldRows))
        flush_rows_.push_back(s);
    flush_held(flush_rows_);
  }
  live_.step_seconds += now_seconds() - t_step;
  if (policy_ && !dec.empty()) {
    int emitted = 0;
    for (Seq* s : dec) emitted += int(s->pending.token_ids.size());
    policy_->observe_step(int(dec.size()), draft_now, emitted, now_seconds() - t_step,
                          int(decode_rows.size()), prefill_tokens);
  }
  if (spec_metrics_) spec_metrics_->verify_seconds += now_seconds() - t_fwd;
  retire();
  return true;
}

int Engine::swap_drafter(std::unique_ptr<Drafter> d) {
  if (!drafter_) fail("load_drafter: this server decodes without a drafter");
  if (!d) fail("load_drafter: no drafter");
  if (d->method() != drafter_->method())
    fail("load_drafter: the new drafter is ", spec_method_name(d->method()), ", the server's is ",
         spec_method_name(drafter_->method()));
  if (d->target_layers() != drafter_->target_layers())
    fail("load_drafter: the new drafter's target_layer_ids differ from the running drafter's");
  if (d->max_draft_tokens() < spec_.num_speculative_tokens)
    fail("load_drafter: the new drafter drafts at most ", d->max_draft_tokens(),
         " tokens; the server verifies num_speculative_tokens ", spec_.num_speculative_tokens);
  std::lock_guard<std::mutex> lk(mu_);
  next_drafter_ = std::move(d);  // a second load before the next step replaces the first
  cv_.notify_all();
  return next_version_;
}

void Engine::install_next_drafter() {
  std::unique_ptr<Drafter> d;
  int version = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    d = std::move(next_drafter_);
    if (d) version = next_version_++;
  }
  if (d) {
    auto v = std::make_unique<DrafterVersion>();
    v->own = std::move(d);
    v->d = v->own.get();
    v->version = version;
    drafters_.push_back(std::move(v));
    drafter_ = drafters_.back()->d;
    live_.drafter_version = drafters_.back()->version;
  }
  // Older versions go once no request holds them.
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

void Engine::capture_row(Seq& s, const ForwardOutput& out, int out_row, int pos) {
  if (pos != s.export_rows) return;  // kept already (or out of order: export_finished reports it)
  const int H = out.hidden;
  const size_t per = opt_.export_bf16 ? 2 : 4, n = export_slot_.size() * size_t(H);
  const size_t at = s.export_bytes.size();
  s.export_bytes.resize(at + n * per);
  char* dst = s.export_bytes.data() + at;
  for (size_t k = 0; k < export_slot_.size(); ++k) {
    const float* src = out.tap(out_row, export_slot_[k]);
    if (opt_.export_bf16)
      convert_f32_to_bf16(src, reinterpret_cast<uint16_t*>(dst) + k * size_t(H), size_t(H));
    else
      std::memcpy(dst + k * size_t(H) * 4, src, size_t(H) * 4);
  }
  ++s.export_rows;
}

void Engine::export_finished(Seq& s) {
  if (s.aborted) return;  // nobody was given its handle
  HiddenExport e;
  e.handle = s.req.export_handle;
  e.request_id = s.req.request_id;
  e.prompt_tokens = s.prompt_len();
  e.output_tokens = int(s.out_tokens.size());
  e.layers = opt_.export_layers;
  e.hidden = model_.config().hidden_size;
  e.bf16 = opt_.export_bf16;
  const int n = s.prompt_len() + (s.req.export_output_tokens ? e.output_tokens - 1 : 0);
  if (s.export_rows < n) {
    e.error = "captured the hidden states of " + std::to_string(s.export_rows) + " of " +
              std::to_string(n) + " positions";
  } else {
    e.token_ids.reserve(size_t(n));
    for (int p = 0; p < n; ++p) e.token_ids.push_back(s.token_at(p));
    const size_t row = s.export_bytes.size() / size_t(s.export_rows);
    s.export_bytes.resize(row * size_t(n));
    e.bytes = std::move(s.export_bytes);
  }
  opt_.on_export(std::move(e));
}

void Engine::flush_held(std::span<Seq* const> seqs) {
  for (auto& v : drafters_) {
    accepts_.clear();
    for (Seq* s : seqs) {
      if (s->committed.empty() || s->draft_seq < 0 || s->dv != v.get()) continue;
      const int rows = int(s->committed.size());
      const TargetFeatures f{s->held_width ? s->held_feats.data() : nullptr,
                             s->held_width ? rows : 0, s->held_width};
      accepts_.push_back(AcceptJob{s->draft_seq, s->committed, s->held_pos, f});
    }
    if (!accepts_.empty()) v->d->accept_batch(accepts_);
  }
  for (Seq* s : seqs) {
    s->committed.clear();
    s->held_feats.clear();
  }
}

// Hands out pending outputs, frees finished requests; returns whether any request remains.
bool Engine::retire() {
  const double now = now_seconds();
  std::vector<std::unique_ptr<Seq>> done;
  for (auto* v : {&waiting_, &running_}) {
    for (auto& s : *v) {
      if (!s->has_pending) continue;
      RequestOutput o = std::move(s->pending);
      s->pending = RequestOutput{};
      s->has_pending = false;
      o.prompt_tokens = s->prompt_len();
      o.completion_tokens = int(s->out_tokens.size());
      if (!o.token_ids.empty()) {
        if (s->last_emit >= 0) live_.itl.observe(now - s->last_emit);
        s->last_emit = now;
      }
      if (o.finished) {
        live_.e2e.observe(now - s->arrival);
        ++live_.request_success[o.finish_reason];
      }
      if (s->on_output) s->on_output(std::move(o));
    }
    for (auto& s : *v)
      if (s->finished) {
        if (s->req.export_hidden && opt_.on_export) export_finished(*s);
        release(*s);
        done.push_back(std::move(s));
      }
    v->erase(std::remove(v->begin(), v->end(), nullptr), v->end());
  }
  publish_metrics();
  const bool any = !waiting_.empty() || !running_.empty();
  std::lock_guard<std::mutex> lk(mu_);
  has_work_ = any;
  if (!any && incoming_.empty()) idle_cv_.notify_all();
  return any;
}

void Engine::publish_metrics() {
  live_.kv_cache_usage_perc = kv_usage();
  live_.num_requests_running = int(running_.size());
  std::lock_guard<std::mutex> lk(mu_);
  live_.num_requests_waiting = int(waiting_.size() + incoming_.size());
  metrics_ = live_;
}

GenerateResult run_alone(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                         const GenerateParams& params, Drafter* drafter, const SpecConfig* spec,
                         VerifyLengthPolicy* policy, SpecMetrics* metrics,
                         const TextCallback& on_text) {
  params.sampling.validate();
  GenerateResult res;
  res.prompt_tokens = int(prompt.size());
  if (prompt.empty()) fail("the prompt is empty");
  GenerateParams p = params;
  p.max_tokens = output_budget(fwd, prompt.size(), params);
  res.finish_reason = "length";
  if (p.max_tokens == 0) return res;
  EngineOptions opt;
  opt.max_num_seqs = 1;
  opt.max_model_len = params.max_model_len;
  const int K = speculation_length(drafter, spec ? *spec : SpecConfig{});
  opt.max_num_batched_tokens = std::max(params.prefill_chunk, K + 1);
  Engine e(fwd, tok, opt, drafter, spec ? *spec : SpecConfig{}, policy);
  e.collect_spec_metrics(metrics);
  const double t0 = now_seconds();
  double first = -1;
  bool stop_asked = false;
  const uint64_t h =
      e.submit(EngineRequest{"", std::vector<int32_t>(prompt.begin(), prompt.end()), p},
               [&](RequestOutput&& o) {
                 if (first < 0 && !o.token_ids.empty()) first = now_seconds();
                 res.tokens.insert(res.tokens.end(), o.token_ids.begin(), o.token_ids.end());
                 if (!o.text.empty()) {
                   res.text += o.text;
                   if (on_text && !on_text(o.text) && !o.finished) stop_asked = true;
                 }
                 if (o.finished) res.finish_reason = o.finish_reason;
               });
  while (e.step())
    if (stop_asked) {
      e.abort(h);
      stop_asked = false;
    }
  const double end = now_seconds();
  res.prefill_seconds = (first < 0 ? end : first) - t0;
  res.decode_seconds = first < 0 ? 0 : end - first;
  return res;
}

}  // namespace dspark
