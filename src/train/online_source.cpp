// Online drafter training: `dspark train drafter --online` sends prompts to serving engines that
// export the target hidden states of every answer to a store (connector/hidden_states_store.h),
// and trains on those samples as they arrive.
//
// Why a mode of the trainer rather than a separate datagen driver feeding it: one process owns
// both the checkpoint and the set of samples consumed, so exactly-once is one atomic checkpoint
// write (the weights, the optimizer and the prompts trained up to that step, together) rather
// than a hand-off between two processes that would each have to agree, after either crashed, on
// which samples the other had taken. The journal below only records facts (a request was sent, a
// response named a handle, a sample was corrupt); what counts as trained is whatever the last
// checkpoint says, and samples leave the store only after a checkpoint that includes them.
//
// Threads: --in-flight workers each take a prompt, POST it to the least-loaded server (retrying
// transport errors and 5xx elsewhere with backoff), verify and journal the response, wait for its
// sample in the store, verify and convert it (train/online_sample.h) and push it into a bounded
// queue; the training thread pops --batch samples per step. A worker reserves its queue slot
// before reading the sample, so at most --queue samples are ever in memory (plus the step's).
// One more thread polls the store's backlog every few seconds for the progress line.
#include "train/online_source.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "core/mmap_file.h"
#include "core/timer.h"

namespace dspark::train {

namespace fs = std::filesystem;
using json = nlohmann::json;
using connector::HiddenStatesStore;
using connector::SampleUnusable;

namespace {

constexpr int kMaxRequestTries =
    10;  // transport errors / 5xx of one prompt before giving up the run
constexpr double kBacklogPollSeconds = 5;  // store backlog polls for the progress line

std::string new_run_id() {
  std::random_device rd;
  std::mt19937_64 g((uint64_t(rd()) << 32) ^ rd() ^
                    uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[32];
  std::snprintf(buf, sizeof buf, "ot%010llx",
                static_cast<unsigned long long>(g() & 0xffffffffffull));
  return buf;
}

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(int64_t(seconds * 1000.0));
}

}  // namespace

OnlineSource::OnlineSource(const OnlineOptions& o, const std::string& out_dir,
                           const std::string& target_dir, TargetNorm norm,
                           std::vector<int> drafter_layers, int batch)
    : o_(o),
      out_(out_dir),
      target_(target_dir),
      norm_(std::move(norm)),
      layers_(std::move(drafter_layers)),
      batch_(batch) {
  if (o_.prompts.empty()) fail("flag --prompts: --online needs a JSONL file of prompts");
  if (o_.store.empty())
    fail("flag --store: --online needs the hidden-states store (redis://HOST:PORT/DB or file:DIR)");
  prompts_ = datagen::load_prompt_file(o_.prompts);
  if (!fs::exists(fs::path(target_) / "tokenizer.json"))
    fail("flag --target: ", target_,
         " has no tokenizer.json (the trainer tokenizes each prompt as the server does)");
  tok_ = Tokenizer::from_dir(target_);
  try {
    format_ = detect_chat_format(*tok_);
  } catch (const Error& e) {
    fail("flag --target: ", target_, "/tokenizer.json has no chat template (", e.what(),
         "); --online sends chat requests");
  }
  pool_ = std::make_unique<ServerPool>(o_.servers, o_.api_key, o_.server_wait);
}

OnlineSource::~OnlineSource() {
  try {
    stop(false);
  } catch (...) {
  }
}

std::vector<ChatMessage> OnlineSource::messages(int64_t prompt) const {
  const datagen::RegenPrompt& p = prompts_[size_t(prompt)];
  std::vector<ChatMessage> m;
  if (!p.system.empty()) m.push_back({"system", p.system});
  m.push_back({"user", p.turns.at(0)});
  return m;
}

void OnlineSource::start(bool resume, const json& state, int64_t needed, EventSink sink) {
  sink_ = std::move(sink);
  const fs::path run_file = fs::path(out_) / "online_run.json";
  const std::string journal_path = (fs::path(out_) / "online_journal.jsonl").string();
  const std::string consumed_path = (fs::path(out_) / "online_consumed.jsonl").string();
  fs::create_directories(out_);
  if (!resume) {
    if (fs::exists(run_file) || fs::exists(journal_path))
      fail(out_,
           ": holds an online run (online_run.json, online_journal.jsonl); pass --resume to "
           "continue it "
           "or choose another --out");
    run_id_ = new_run_id();
    const std::string text =
        json{{"run_id", run_id_}, {"prompts", o_.prompts}, {"store", o_.store}}.dump(2) + "\n";
    write_file_atomic(run_file.string(), text.data(), text.size());
    fs::remove(consumed_path);
  } else {
    if (!fs::exists(run_file))
      fail(out_, ": --resume --online given but it holds no online run (", run_file.string(), ")");
    const json r = json::parse(read_text_file(run_file.string()), nullptr, false);
    if (r.is_discarded() || !r.is_object() || !r.contains("run_id") || !r["run_id"].is_string())
      fail(run_file.string(), ": malformed (expected {\"run_id\": \"...\"})");
    run_id_ = r["run_id"].get<std::string>();
    if (state.is_object() && state.value("run_id", run_id_) != run_id_)
      fail(run_file.string(), ": run id ", run_id_, " differs from the checkpoint's ",
           state["run_id"].dump());
  }
  prefix_ = run_id_ + "-";
  main_store_ = connector::open_store(o_.store);

  // Replay: the checkpoint says what is trained; the journal what else happened.
  const std::vector<JournalEntry> journal = read_journal(journal_path, /*repair=*/true);
  IndexSet trained;
  int64_t consumed_bytes = 0;
  if (state.is_object()) {
    trained = IndexSet::from_json(state.value("trained", json::array()),
                                  "checkpoint field extra.online.trained");
    consumed_bytes = state.value("consumed_bytes", int64_t(0));
  }
  if (fs::exists(consumed_path))
    truncate_file(consumed_path, consumed_bytes);
  else if (consumed_bytes > 0)
    fail(consumed_path, ": missing, but the checkpoint recorded ", consumed_bytes, " bytes of it");
  const ResumePlan plan = plan_resume(prompt_count(), journal, trained, journal_path);
  for (const std::string& h : plan.remove) main_store_->delete_sample(h);

  // Each work item carries its prompt's journaled counts; the plan (every prompt the journal
  // names) is dropped at the end of start().
  auto journaled = [&](int64_t p) {
    const auto it = plan.state.find(p);
    return it == plan.state.end() ? PromptState{} : it->second;
  };
  std::lock_guard<std::mutex> lock(mu_);
  trained_set_ = trained;
  n_trained_ = trained.size();
  n_failed_ = int64_t(plan.failed.size());
  for (const ResumeFetch& f : plan.fetch)
    todo_.push_back({f.prompt, true, f.handle, f.server, f.generated, journaled(f.prompt)});
  for (int64_t p : plan.request) todo_.push_back({p, false, {}, {}, {}, journaled(p)});
  need_ = needed;
  capacity_ = o_.queue > 0 ? o_.queue : 2 * batch_;
  journal_ = std::make_unique<SyncedLog>(journal_path);
  consumed_ = std::make_unique<SyncedLog>(consumed_path, /*sync_each=*/false);
  json servers = json::array();
  for (size_t i = 0; i < pool_->size(); ++i)
    servers.push_back({{"url", pool_->url(i)}, {"model", pool_->model(i)}});
  event({{"event", "online_start"},
         {"run_id", run_id_},
         {"prompts", prompt_count()},
         {"trained", n_trained_},
         {"fetch", plan.fetch.size()},
         {"request", plan.request.size()},
         {"removed", plan.remove.size()},
         {"failed", n_failed_},
         {"needed", needed},
         {"store", o_.store},
         {"servers", servers}});
  start_time_ = now_seconds();
  started_ = true;
  const int workers = o_.in_flight > 0 ? o_.in_flight : int(2 * pool_->size());
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker(); });
  poller_ = std::thread([this] { poller(); });
}

void OnlineSource::event(json j) {
  if (sink_) sink_(j);
}

void OnlineSource::fatal(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = e;
    stopping_ = true;
  }
  cv_.notify_all();
  pool_->stop_all();
}

bool OnlineSource::sleep_unless_stopped(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return stopping_; });
  return !stopping_;
}

void OnlineSource::worker() {
  try {
    std::unique_ptr<HiddenStatesStore> store = connector::open_store(o_.store);
    while (auto w = take()) process(std::move(*w), *store);
  } catch (...) {
    fatal(std::current_exception());
  }
}

void OnlineSource::poller() {
  std::unique_ptr<HiddenStatesStore> store;
  for (;;) {
    try {
      if (!store) store = connector::open_store(o_.store);
      backlog_ = int64_t(store->handles(prefix_).size());
    } catch (const std::exception&) {
      backlog_ = -1;
      if (store) store->reconnect();
    }
    if (!sleep_unless_stopped(kBacklogPollSeconds)) return;
  }
}

std::optional<OnlineSource::Work> OnlineSource::take() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (stopping_ || todo_.empty() || need_ <= 0) return std::nullopt;
    if (active_ < need_) {  // never more work out than samples still needed
      Work w = std::move(todo_.front());
      todo_.pop_front();
      ++active_;
      return w;
    }
    cv_.wait(lock);
  }
}

void OnlineSource::finish_work() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
  }
  cv_.notify_all();
}

bool OnlineSource::reserve_slot() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopping_ || reserved_ < capacity_; });
  if (stopping_) return false;
  ++reserved_;
  return true;
}

void OnlineSource::release_slot() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --reserved_;
  }
  cv_.notify_all();
}

void OnlineSource::give_up(int64_t prompt, const std::string& why) {
  JournalEntry e;
  e.kind = JournalEntry::Kind::Failed;
  e.prompt = prompt;
  e.why = why;
  journal_->append(e.to_json());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_failed_;
  }
  event({{"event", "prompt_failed"}, {"prompt", prompt}, {"why", why}});
}

bool OnlineSource::corrupt(int64_t prompt, PromptState& state, const std::string& handle,
                           const std::string& why, HiddenStatesStore& store,
                           bool wait_for_manifest) {
  event({{"event", "corrupt_sample"}, {"prompt", prompt}, {"handle", handle}, {"why", why}});
  JournalEntry e;
  e.kind = JournalEntry::Kind::Corrupt;
  e.prompt = prompt;
  e.handle = handle;
  e.why = why;
  journal_->append(e.to_json());
  // A refused response's sample is written after the response: wait for it so that deleting it
  // is not a no-op (the end-of-run sweep catches one that comes later still).
  const double deadline = now_seconds() + o_.sample_timeout;
  while (wait_for_manifest && now_seconds() < deadline) {
    try {
      if (store.get_manifest(handle)) break;
    } catch (const connector::StoreError&) {
    }
    if (!sleep_unless_stopped(0.05)) break;
  }
  try {
    store.delete_sample(handle);
  } catch (const connector::StoreError& x) {
    event({{"event", "warning"},
           {"handle", handle},
           {"why", std::string("cannot delete: ") + x.what()}});
  }
  const int n = ++state.corrupt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++n_corrupt_;
  }
  if (n < kMaxCorruptAttempts) return false;
  give_up(prompt, std::to_string(n) + " corrupt samples, the last: " + why);
  return true;
}

std::optional<OnlineSource::Reply> OnlineSource::request(int64_t prompt, PromptState& state) {
  int avoid = -1;
  const std::vector<ChatMessage> msgs = messages(prompt);
  for (int tries = 0;; ++tries) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return std::nullopt;
    }
    const int attempt = state.next_attempt++;
    const std::string rid =
        run_id_ + "-p" + std::to_string(prompt) + "-a" + std::to_string(attempt);
    const size_t s = pool_->acquire(avoid);
    JournalEntry sent;
    sent.kind = JournalEntry::Kind::Sent;
    sent.prompt = prompt;
    sent.attempt = attempt;
    sent.handle = connector::sanitize_handle(rid);
    sent.server = pool_->url(s);
    journal_->append(sent.to_json());
    const std::string body = chat_request_body(pool_->model(s), msgs, o_.max_tokens).dump();
    const HttpReply r = pool_->post(s, "/v1/chat/completions", body, rid, o_.request_timeout);
    pool_->release(s, r.status == 200);
    const std::string where = "POST " + pool_->url(s) + "/v1/chat/completions (prompt " +
                              std::to_string(prompt) + ", x-request-id " + rid + ")";
    if (r.status == 200) {
      ChatReply cr = parse_chat_reply(r.body, where);  // a malformed answer is a server bug: fatal
      if (cr.handle.rfind(prefix_, 0) != 0)
        event({{"event", "warning"},
               {"handle", cr.handle},
               {"why",
                "the handle does not start with the run's prefix " + prefix_ +
                    " (the server ignores x-request-id?): the end-of-run sweep cannot find it"}});
      return Reply{std::move(cr.prompt_ids), std::move(cr.token_ids), cr.handle, pool_->url(s)};
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return std::nullopt;
    }
    const std::string what =
        r.status < 0 ? r.body : "status " + std::to_string(r.status) + ": " + r.body.substr(0, 300);
    if (is_final_status(r.status)) {
      event({{"event", "request_failed"},
             {"prompt", prompt},
             {"server", pool_->url(s)},
             {"status", r.status},
             {"why", what}});
      give_up(prompt, where + ": " + what);
      return std::nullopt;
    }
    if (tries + 1 >= kMaxRequestTries)
      fail(where, ": ", what, " (", tries + 1, " tries over ", pool_->size(),
           " server(s)); are the --servers up?");
    const double wait = retry_backoff_s(tries);
    event({{"event", "request_retry"},
           {"prompt", prompt},
           {"server", pool_->url(s)},
           {"why", what},
           {"retry_in_s", wait}});
    avoid = int(s);
    if (!sleep_unless_stopped(wait)) return std::nullopt;
  }
}

void OnlineSource::process(Work w, HiddenStatesStore& store) {
  const int64_t p = w.prompt;
  const std::vector<int32_t> prompt_ids =
      tok_->encode(apply_chat_template(format_, messages(p), true), false);
  std::string handle = std::move(w.handle), server = std::move(w.server);
  std::vector<int32_t> generated = std::move(w.generated);
  bool have = w.fetch;
  for (;;) {
    if (!have) {
      std::optional<Reply> r = request(p, w.state);
      if (!r) return finish_work();
      if (r->prompt_ids != prompt_ids) {
        const std::string why = "prompt_token_ids (" + std::to_string(r->prompt_ids.size()) +
                                " ids) differ from the trainer's tokenization of the prompt (" +
                                std::to_string(prompt_ids.size()) + " ids)";
        if (corrupt(p, w.state, r->handle, why, store, /*wait_for_manifest=*/true))
          return finish_work();
        continue;
      }
      handle = r->handle;
      server = r->server;
      generated = std::move(r->generated);
      JournalEntry e;
      e.kind = JournalEntry::Kind::Handle;
      e.prompt = p;
      e.handle = handle;
      e.server = server;
      e.generated = generated;
      journal_->append(e.to_json());
    }
    have = false;
    if (!reserve_slot()) return finish_work();
    std::string why;
    try {
      // In slices, so that a stopping trainer does not wait out --sample-timeout.
      const double deadline = now_seconds() + o_.sample_timeout;
      std::optional<connector::HiddenSample> hs;
      while (!hs) {
        const double left = deadline - now_seconds();
        try {
          hs = connector::wait_for_sample(store, handle, ms(std::clamp(left, 0.05, 1.0)));
        } catch (const SampleUnusable& e) {
          if (e.why != SampleUnusable::Why::Timeout || left <= 1.0) throw;
        } catch (const connector::StoreError&) {
          if (left <= 1.0) throw;
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) {
          --reserved_;
          --active_;
          return;
        }
      }
      OnlineItem it{to_train_sample(*hs, prompt_ids, generated, layers_, norm_), p, handle, server};
      it.sample.id = p;
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(std::move(it));
        --need_;
        --active_;
      }
      cv_.notify_all();
      return;
    } catch (const SampleUnusable& e) {
      why =
          std::string(connector::why_name(e.why)) + ": " +
          (e.why == SampleUnusable::Why::Timeout
               ? "sample '" + handle + "' was not committed to the store within --sample-timeout " +
                     std::to_string(o_.sample_timeout) + " s"
               : std::string(e.what()));
    } catch (const CorruptSample& e) {
      why = std::string("token ids: ") + e.what();
    }
    release_slot();
    if (corrupt(p, w.state, handle, why, store, /*wait_for_manifest=*/false)) return finish_work();
  }
}

std::optional<OnlineItem> OnlineSource::pop() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] {
    return error_ || stopping_ || !queue_.empty() ||
           (active_ == 0 && (todo_.empty() || need_ <= 0));
  });
  if (error_) std::rethrow_exception(error_);
  if (queue_.empty()) return std::nullopt;
  OnlineItem it = std::move(queue_.front());
  queue_.pop_front();
  --reserved_;
  lock.unlock();
  cv_.notify_all();
  return it;
}

void OnlineSource::trained(const OnlineItem& it, int64_t steps_done) {
  consumed_->append(
      {{"prompt", it.prompt}, {"handle", it.handle}, {"step", steps_done}, {"server", it.server}});
  std::lock_guard<std::mutex> lock(mu_);
  trained_set_.insert(it.prompt);
  trained_handles_.push_back(it.handle);
  ++n_trained_;
  ++n_trained_session_;
}

json OnlineSource::checkpoint_state() {
  consumed_
      ->sync();  // every line up to this step is on disk before the checkpoint names its length
  std::lock_guard<std::mutex> lock(mu_);
  deleting_.insert(deleting_.end(), trained_handles_.begin(), trained_handles_.end());
  trained_handles_.clear();
  return {{"run_id", run_id_},
          {"trained", trained_set_.to_json()},
          {"consumed_bytes", consumed_->bytes()},
          {"trained_count", n_trained_}};
}

void OnlineSource::checkpoint_saved() {
  std::vector<std::string> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handles.swap(deleting_);
  }
  for (const std::string& h : handles) {
    try {
      main_store_->delete_sample(h);
    } catch (const connector::StoreError& e) {
      // Left for the resume plan or the end-of-run sweep.
      event({{"event", "warning"},
             {"handle", h},
             {"why", std::string("cannot delete: ") + e.what()}});
    }
  }
}

void OnlineSource::stop(bool complete) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopping_ = true;
    stopped_ = true;
  }
  cv_.notify_all();
  if (pool_) pool_->stop_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  if (poller_.joinable()) poller_.join();
  if (!complete || !started_) return;
  // The sweep: whatever is left under this run's prefix (responses lost in a crash, samples that
  // came after their request was given up) is of no use to anyone.
  try {
    int64_t n = 0;
    for (const std::string& h : main_store_->handles(prefix_)) {
      main_store_->delete_sample(h);
      ++n;
    }
    event({{"event", "sweep"}, {"prefix", prefix_}, {"deleted", n}});
  } catch (const connector::StoreError& e) {
    event({{"event", "warning"}, {"why", std::string("the end-of-run sweep failed: ") + e.what()}});
  }
}

json OnlineSource::reload_drafter(const std::string& abs_dir) {
  json answers = json::array();
  const std::string body = json{{"path", abs_dir}}.dump();
  for (size_t i = 0; i < pool_->size(); ++i) {
    const HttpReply r = pool_->post(i, "/v1/load_drafter", body, "", 300);
    answers.push_back(
        {{"server", pool_->url(i)}, {"status", r.status}, {"body", r.body.substr(0, 500)}});
  }
  return answers;
}

OnlineSource::Bookkeeping OnlineSource::bookkeeping() const {
  std::lock_guard<std::mutex> lock(mu_);
  Bookkeeping b;
  b.pending = int64_t(todo_.size());
  b.in_flight = active_;
  b.queued = int64_t(queue_.size());
  b.trained_ranges = trained_set_.ranges();
  b.handles_to_delete = int64_t(trained_handles_.size() + deleting_.size());
  return b;
}

json OnlineSource::step_fields() const {
  json requests = json::object();
  for (size_t i = 0; i < pool_->size(); ++i) requests[pool_->url(i)] = pool_->counts(i).requests;
  std::lock_guard<std::mutex> lock(mu_);
  const double dt = now_seconds() - start_time_;
  return {{"samples_s", dt > 0 ? double(n_trained_session_) / dt : 0.0},
          {"backlog", backlog_.load()},
          {"trained", n_trained_},
          {"corrupt", n_corrupt_},
          {"failed", n_failed_},
          {"queued", queue_.size()},
          {"requests", requests}};
}

std::string OnlineSource::status_line() const {
  const json f = step_fields();
  char buf[96];
  std::snprintf(
      buf, sizeof buf, "%.2f samples/s | backlog %s | req", f["samples_s"].get<double>(),
      f["backlog"].get<int64_t>() < 0 ? "?" : std::to_string(f["backlog"].get<int64_t>()).c_str());
  std::string s = buf;
  for (size_t i = 0; i < pool_->size(); ++i) s += " " + std::to_string(pool_->counts(i).requests);
  return s;
}

json OnlineSource::summary() const {
  json servers = json::array();
  for (size_t i = 0; i < pool_->size(); ++i) {
    const ServerPool::Counts c = pool_->counts(i);
    servers.push_back(
        {{"url", pool_->url(i)}, {"requests", c.requests}, {"ok", c.ok}, {"failed", c.failed}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  return {{"trained", n_trained_},
          {"corrupt", n_corrupt_},
          {"failed", n_failed_},
          {"servers", servers}};
}

}  // namespace dspark::train
