#include "runtime/engine.h"

#include <algorithm>

#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/timer.h"
#include "runtime/context_limit.h"

namespace dspark {

Engine::Engine(const Model& model, const Tokenizer& tok, EngineOptions opt,
               std::unique_ptr<Drafter> drafter, SpecConfig spec,
               std::unique_ptr<VerifyLengthPolicy> policy)
    : model_(model), tok_(tok), opt_(opt), spec_(std::move(spec)), own_policy_(std::move(policy)) {
  policy_ = own_policy_.get();
  const ModelConfig& c = model.config();
  max_model_len_ = resolve_max_model_len(c, opt_.max_model_len);
  const int K = speculation_length(drafter.get(), spec_);
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
  Drafter* d = drafter.get();
  init(std::move(drafter), d);
}

Engine::Engine(Forward& fwd, const Tokenizer& tok, EngineOptions opt, Drafter* drafter,
               SpecConfig spec, VerifyLengthPolicy* policy)
    : model_(fwd.model()),
      tok_(tok),
      opt_(opt),
      spec_(std::move(spec)),
      policy_(policy),
      kv_(&fwd.kv()),
      fwd_(&fwd) {
  max_model_len_ = resolve_max_model_len(model_.config(), opt_.max_model_len);
  init(nullptr, drafter);
}

void Engine::init(std::unique_ptr<Drafter> own, Drafter* drafter) {
  if (opt_.max_num_seqs < 1) fail("--max-num-seqs must be >= 1, got ", opt_.max_num_seqs);
  if (drafter) {
    spec_.num_speculative_tokens = speculation_length(drafter, spec_);
    if (spec_.num_speculative_tokens > drafter->max_draft_tokens())
      fail("speculative config: num_speculative_tokens ", spec_.num_speculative_tokens,
           " is more than the drafter's ", drafter->max_draft_tokens());
    if (!policy_) {
      own_policy_ = std::make_unique<FullBlockPolicy>();
      policy_ = own_policy_.get();
    }
    has_drafter_ = true;
    drafter_method_ = drafter->method();
    drafter_layers_ = drafter->target_layers();
  }
  const int K = drafter ? spec_.num_speculative_tokens : 0;
  if (opt_.max_num_batched_tokens < K + 1)
    fail("--max-num-batched-tokens ", opt_.max_num_batched_tokens, " cannot hold one round of ",
         K + 1, " tokens");
  kv_->set_prefix_caching(opt_.enable_prefix_caching);
  out_ = std::make_unique<OutputProcessor>(model_.config(), opt_, K);
  runner_ =
      std::make_unique<ModelRunner>(*fwd_, opt_, std::move(own), drafter, spec_, policy_, *out_);
  SchedulerConfig sc;
  sc.max_num_seqs = opt_.max_num_seqs;
  sc.max_num_batched_tokens = opt_.max_num_batched_tokens;
  sc.max_model_len = max_model_len_;
  sc.prefill_first = opt_.prefill_first;
  scheduler_ = std::make_unique<RequestScheduler>(sc, *kv_, hooks_);
  EngineMetrics& live = out_->metrics();
  live.spec_num_accepted_tokens_per_pos.assign(size_t(K), 0);
  if (drafter) live.drafter_version = 1;
  next_version_ = 2;
  live.spec_verify_length_hist.assign(size_t(K + 1), 0);
  metrics_ = live;
}

Engine::~Engine() {
  stop();
}

void Engine::Hooks::admitted(RequestState& r, double now) {
  e_.runner_->admitted(r);
  if (r.scheduled < 0) {
    r.scheduled = now;
    e_.out_->metrics().queue_time.observe(now - r.arrival);
  }
}

int Engine::Hooks::prefix_attached(RequestState& r, std::span<const int32_t> tokens, int n) {
  return e_.runner_->prefix_attached(r, tokens, n);
}

void Engine::Hooks::released(RequestState& r) {
  e_.runner_->released(r);
}

int64_t Engine::kv_capacity_tokens() const {
  return int64_t(kv_->total_blocks()) * kKvBlock;
}

int Engine::length_limit() const {
  return int(std::min<int64_t>(max_model_len_, kv_capacity_tokens()));
}

void Engine::check(const EngineRequest& req) const {
  constexpr ErrorKind kInvalid = ErrorKind::InvalidRequest;
  const GenerateParams& p = req.params;
  p.validate();
  if (req.prompt.empty()) fail_request(kInvalid, "prompt", "prompt: the prompt has no tokens");
  check_token_ids(req.prompt, model_.config().vocab_size, "prompt");
  p.logits_params.validate(model_.config().vocab_size);
  const int64_t n = int64_t(req.prompt.size());
  const int limit = length_limit();
  check_prompt_length(n, max_model_len_, kv_capacity_tokens());
  if (p.max_tokens != kAsManyAsFit && n + p.max_tokens > limit)
    fail_request(ErrorKind::ContextLengthExceeded, "max_tokens",
                 "max_tokens: this model's maximum context length is ", limit,
                 " tokens; the prompt has ", n, " and max_tokens asks for ", p.max_tokens,
                 " more (", n + p.max_tokens, " in all)");
  if (req.export_hidden && opt_.export_layers.empty())
    fail_request(kInvalid, "kv_transfer_params",
                 "kv_transfer_params: this server exports no hidden states (start it with a "
                 "--kv-transfer-config)");
}

uint64_t Engine::submit(EngineRequest req, OutputFn on_output) {
  if (!accepting_) fail_request(ErrorKind::Unavailable, "", "the server is shutting down");
  check(req);
  const int64_t n = int64_t(req.prompt.size());
  auto s = std::make_unique<RequestState>(0, std::move(req), std::move(on_output), tok_);
  if (s->req.params.logits_params.any())
    s->processor = std::make_unique<LogitsProcessor>(s->req.params.logits_params, s->req.prompt,
                                                     model_.config().vocab_size);
  s->max_tokens = generation_budget(n, s->req.params.max_tokens, length_limit());
  s->target_len = int(n);
  s->arrival = now_seconds();
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) fail_request(ErrorKind::Unavailable, "", "the server is shutting down");
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
          return stopping_ || !incoming_.empty() || !aborts_.empty() ||
                 scheduler_->has_requests() || next_drafter_;
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
  RequestQueue all;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& r : incoming_) all.push_back(std::move(r));
    incoming_.clear();
    metrics_.num_requests_running = metrics_.num_requests_waiting = 0;
    has_work_ = false;
  }
  // Engine thread (or none: stop() joined it): the scheduler's queues are this thread's.
  for (RequestQueue* q : {&scheduler_->waiting(), &scheduler_->running()}) {
    for (auto& r : *q) all.push_back(std::move(r));
    q->clear();
  }
  for (auto& r : all) {
    scheduler_->release(*r);
    RequestOutput o;
    o.finished = true;
    o.finish_reason = "abort";
    o.error = why;
    o.prompt_tokens = r->prompt_len();
    o.completion_tokens = int(r->out_tokens.size());
    if (r->on_output) r->on_output(std::move(o));
  }
  std::lock_guard<std::mutex> lk(mu_);
  metrics_.kv_cache_usage_perc = scheduler_->kv_usage();
  idle_cv_.notify_all();
}

void Engine::take_intake() {
  std::vector<uint64_t> aborts;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // Set before incoming_ empties: drain() must not see a gap.
    if (!incoming_.empty()) has_work_ = true;
    for (auto& r : incoming_) scheduler_->add(std::move(r));
    incoming_.clear();
    aborts.swap(aborts_);
  }
  for (RequestQueue* q : {&scheduler_->waiting(), &scheduler_->running()}) {
    for (auto& r : *q)
      if (std::find(aborts.begin(), aborts.end(), r->handle) != aborts.end())
        r->abort_requested = true;
    for (auto& r : *q)
      if (r->abort_requested) out_->finish(*r, "abort");
  }
}

// One step (docs/serving.md, "One step").
bool Engine::step() {
  take_intake();
  install_next_drafter();
  if (!retire()) return false;
  const double t_step = now_seconds();
  const StepPlan& plan = scheduler_->schedule(runner_->drafts_per_round(), t_step);
  if (plan.empty()) {  // nothing fits now (the scheduler preempted to make room)
    publish_metrics();
    return true;
  }
  const bool drafted = runner_->propose(plan);
  runner_->execute(plan, drafted, t_step);
  retire();
  runner_->step_delivered();
  return true;
}

int Engine::swap_drafter(std::unique_ptr<Drafter> d) {
  if (!has_drafter_) fail("load_drafter: this server decodes without a drafter");
  if (!d) fail("load_drafter: no drafter");
  if (d->method() != drafter_method_)
    fail("load_drafter: the new drafter is ", spec_method_name(d->method()), ", the server's is ",
         spec_method_name(drafter_method_));
  if (d->target_layers() != drafter_layers_)
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
    runner_->install_drafter(std::move(d), version);
    out_->metrics().drafter_version = version;
  }
  runner_->free_unused_drafters();  // older versions go once no request holds them
}

bool Engine::retire() {
  RequestQueue done;
  const double now = now_seconds();
  out_->deliver(scheduler_->waiting(), done, now);
  out_->deliver(scheduler_->running(), done, now);
  for (auto& r : done) scheduler_->release(*r);
  done.clear();
  publish_metrics();
  const bool any = scheduler_->has_requests();
  std::lock_guard<std::mutex> lk(mu_);
  has_work_ = any;
  if (!any && incoming_.empty()) idle_cv_.notify_all();
  return any;
}

void Engine::publish_metrics() {
  EngineMetrics& live = out_->metrics();
  live.kv_cache_usage_perc = scheduler_->kv_usage();
  live.num_requests_running = int(scheduler_->running().size());
  live.num_preemptions = scheduler_->preemptions();
  live.prefix_cache_queries = scheduler_->prefix_queries();
  live.prefix_cache_hits = scheduler_->prefix_hits();
  std::lock_guard<std::mutex> lk(mu_);
  live.num_requests_waiting = int(scheduler_->waiting().size() + incoming_.size());
  metrics_ = live;
}

}  // namespace dspark
