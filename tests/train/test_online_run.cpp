// `dspark train drafter --online` end to end against fake OpenAI servers (cpp-httplib, in this
// process) that answer chat requests the way the hidden-states server side does (top-level
// prompt_token_ids, choices[0].token_ids, kv_transfer_params.handle) and write each answer's
// sample to a real store, a directory or a redis-server started by the test, after responding.
// Faults are injected per (prompt, attempt): 503, 400, an error manifest, wrong token ids in the
// sample or the response, no sample at all. A crash (SIGKILL of dspark-train) and --resume must
// train every prompt exactly once and leave nothing in the store.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "../connector/connector_fixtures.h"
#include "../datagen/fixtures.h"
#include "connector/hidden_states_store.h"
#include "core/error.h"
#include "model/model.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafter_config.h"
#include "spec_decode/spec_config.h"
#include "tokenizer/tokenizer.h"
#include "train/drafter_trainer.h"
#include "train/online_ledger.h"
#include "train/online_source.h"

namespace dspark::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using dspark::testing::TempDir;

enum class Fault {
  None,
  Status503,
  Status400,
  ErrorManifest,
  WrongSampleTokens,
  WrongPromptIds,
  NoSample
};
using FaultFn = std::function<Fault(int64_t prompt, int attempt)>;

// One tiny target (3 layers, hidden 64, a ChatML tokenizer) for every test of the binary.
struct Target {
  TempDir dir;
  std::string path;
  Target() {
    path = dir.sub("target");
    dir.write("target/tokenizer.json", dspark::testing::tiny_tokenizer_json(300));
    save_model_dir(dspark::testing::tiny_config(),
                   dspark::testing::BiasedSource(7, dspark::testing::kImEnd, 0.25f), path,
                   DType::F32);
  }
};
const std::string& target() {
  static Target t;
  return t.path;
}

// A fake server: generates `generated` ids per prompt, answers, then (on its writer thread) puts
// the sample [prompt ++ generated[:-1]] x layer_ids into the store, as the connector does.
class FakeServer {
 public:
  FakeServer(std::string store_url, std::vector<int> layer_ids, FaultFn fault, int delay_ms = 0,
             const std::string& target_dir = target(), int hidden = 64)
      : store_url_(std::move(store_url)),
        layer_ids_(std::move(layer_ids)),
        fault_(std::move(fault)),
        delay_ms_(delay_ms),
        hidden_(hidden),
        tok_(Tokenizer::from_dir(target_dir)),
        format_(detect_chat_format(*tok_)) {
    srv_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})",
                      "application/json");
    });
    srv_.Post("/v1/chat/completions",
              [this](const httplib::Request& req, httplib::Response& res) { chat(req, res); });
    srv_.Post("/v1/load_drafter", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      reloads_.push_back(json::parse(req.body)["path"].get<std::string>());
      res.set_content(R"({"status": "ok"})", "application/json");
    });
    port_ = srv_.bind_to_any_port("127.0.0.1");
    listener_ = std::thread([this] { srv_.listen_after_bind(); });
    writer_ = std::thread([this] { write_loop(); });
  }
  ~FakeServer() {
    srv_.stop();
    listener_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_.notify_all();
    writer_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }
  std::vector<std::string> reloads() {
    std::lock_guard<std::mutex> lock(mu_);
    return reloads_;
  }
  // The samples written and not yet done (so a test can wait for the writer to drain).
  bool idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.empty() && !writing_;
  }

 private:
  struct Job {
    connector::HiddenSample sample;
    bool error = false;
  };
  void chat(const httplib::Request& req, httplib::Response& res) {
    ++requests_;
    static const std::regex id_re(".*-p([0-9]+)-a([0-9]+)$");
    std::smatch m;
    const std::string rid = req.get_header_value("x-request-id");
    if (!std::regex_match(rid, m, id_re)) {
      res.status = 400;
      res.set_content(R"({"error": {"message": "bad x-request-id"}})", "application/json");
      return;
    }
    const int64_t prompt = std::stoll(m[1]);
    const int attempt = std::stoi(m[2]);
    const Fault f = fault_ ? fault_(prompt, attempt) : Fault::None;
    if (delay_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    if (f == Fault::Status503 || f == Fault::Status400) {
      res.status = f == Fault::Status503 ? 503 : 400;
      res.set_content(R"({"error": {"message": "injected"}})", "application/json");
      return;
    }
    const json body = json::parse(req.body);
    EXPECT_EQ(body["temperature"], 0);
    EXPECT_EQ(body["kv_transfer_params"]["include_output_tokens"], true);
    std::vector<ChatMessage> msgs;
    for (const auto& x : body["messages"]) msgs.push_back({x["role"], x["content"]});
    std::vector<int32_t> prompt_ids = tok_->encode(apply_chat_template(format_, msgs, true));
    std::vector<int32_t> gen;
    for (int k = 0; k < body["max_tokens"].get<int>(); ++k)
      gen.push_back(3 + int32_t((prompt * 13 + k * 7) % 250));
    const std::string handle = connector::sanitize_handle(rid);
    Job job;
    job.error = f == Fault::ErrorManifest;
    job.sample.handle = handle;
    job.sample.token_ids.assign(prompt_ids.begin(), prompt_ids.end());
    job.sample.token_ids.insert(job.sample.token_ids.end(), gen.begin(), gen.end() - 1);
    if (f == Fault::WrongSampleTokens) job.sample.token_ids.back() += 1;
    job.sample.layer_ids = layer_ids_;
    job.sample.hidden = hidden_;
    job.sample.dtype = "bfloat16";
    const size_t count = job.sample.token_ids.size() * layer_ids_.size() * size_t(hidden_);
    job.sample.hidden_bytes.resize(count * 2);
    for (size_t i = 0; i < count; ++i) {
      const uint16_t b = f32_to_bf16(float(int((prompt * 31 + i * 7) % 61) - 30) / 8.0f);
      std::memcpy(job.sample.hidden_bytes.data() + 2 * i, &b, 2);
    }
    json out = {
        {"id", "chatcmpl-" + rid},
        {"object", "chat.completion"},
        {"model", "fake-model"},
        {"prompt_token_ids", f == Fault::WrongPromptIds ? std::vector<int32_t>{1, 2} : prompt_ids},
        {"choices",
         {{{"index", 0},
           {"message", {{"role", "assistant"}, {"content", "x"}}},
           {"finish_reason", "length"},
           {"token_ids", gen}}}},
        {"kv_transfer_params", {{"handle", handle}}}};
    res.set_content(out.dump(), "application/json");
    if (f == Fault::NoSample) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  void write_loop() {
    std::unique_ptr<connector::HiddenStatesStore> store = connector::open_store(store_url_);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return closing_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      Job j = std::move(jobs_.front());
      jobs_.pop_front();
      writing_ = true;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // after the response, as vLLM
      // A write can race the trainer deleting a sample it stopped waiting for (the file store's
      // rename then finds its temporary file gone): the sample is lost, as a real server's
      // exporter gives it up, and the trainer has already re-requested or failed the prompt.
      try {
        if (j.error)
          store->put_error(j.sample.handle, "injected extraction failure");
        else
          store->put_sample(j.sample);
      } catch (const connector::StoreError&) {
      }
      lock.lock();
      writing_ = false;
    }
  }

  std::string store_url_;
  std::vector<int> layer_ids_;
  FaultFn fault_;
  int delay_ms_, hidden_;
  std::unique_ptr<Tokenizer> tok_;
  ChatFormat format_;
  httplib::Server srv_;
  int port_ = 0;
  std::thread listener_, writer_;
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool closing_ = false, writing_ = false;
  std::vector<std::string> reloads_;
};

// The store of a test: a directory, or a redis-server of its own.
struct Store {
  TempDir dir;
  std::unique_ptr<connector_test::RedisServer> redis;
  std::string url;
  explicit Store(const std::string& kind) {
    if (kind == "redis") {
      redis = std::make_unique<connector_test::RedisServer>(dir.sub("redis"), false);
      if (!redis->start()) throw std::runtime_error("redis-server did not start: " + redis->log());
      url = redis->url(0);
    } else {
      url = "file:" + dir.sub("store");
    }
  }
  std::vector<std::string> left() { return connector::open_store(url)->handles(""); }
};

std::string prompts_file(const TempDir& t, int n) {
  std::string text;
  for (int i = 0; i < n; ++i)
    text +=
        json(i % 3 == 0 ? json{{"prompt", "question " + std::to_string(i)}, {"system", "be brief"}}
                        : json{{"turns", {"tell me about " + std::to_string(i), "and more"}}})
            .dump() +
        "\n";
  return t.write("prompts.jsonl", text);
}

DrafterTrainConfig online_config(const std::string& out, const std::string& prompts,
                                 const std::string& store,
                                 const std::vector<std::string>& servers) {
  DrafterTrainConfig c;
  c.method = SpecMethod::DSpark;
  c.target = target();
  c.out = out;
  c.layers = 1;
  c.drafts = 4;
  c.markov_rank = 8;
  c.anchors = 8;
  c.batch = 2;
  c.lr = 1e-3;
  c.threads = 1;
  c.precision = "f32";
  c.target_layers = {0, 2};  // vLLM 1, 3, and 3 = L for the final state
  c.online.enabled = true;
  c.online.prompts = prompts;
  c.online.servers = servers;
  c.online.store = store;
  c.online.max_tokens = 6;
  c.online.sample_timeout = 1.5;
  c.online.request_timeout = 30;
  c.online.server_wait = 10;
  return c;
}

std::vector<json> jsonl(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(json::parse(l));
  return out;
}

// Prompt -> how many lines of OUT/online_consumed.jsonl train it.
std::map<int64_t, int> consumed_counts(const std::string& out) {
  std::map<int64_t, int> n;
  for (const json& j : jsonl(out + "/online_consumed.jsonl")) ++n[j["prompt"].get<int64_t>()];
  return n;
}

const std::vector<int> kServerLayers = {0, 1, 2, 3};  // a superset of what the drafter needs

class OnlineRun : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "redis" && !connector_test::redis_available())
      GTEST_SKIP() << connector_test::kRedisServer << " is absent (Debian package redis-server)";
  }
};

TEST_P(OnlineRun, TrainsEachGoodPromptOnceAndSkipsCorruptSamples) {
  Store store(GetParam());
  TempDir t;
  const FaultFn faults = [](int64_t p, int a) {
    if (p == 1 && a == 0) return Fault::Status503;      // retried on the other server
    if (p == 2 && a == 0) return Fault::ErrorManifest;  // corrupt, re-requested
    if (p == 3 && a == 0) return Fault::WrongSampleTokens;
    if (p == 4 && a == 0) return Fault::WrongPromptIds;
    if (p == 5) return Fault::Status400;           // failed, not retried
    if (p == 6 && a == 0) return Fault::NoSample;  // --sample-timeout
    if (p == 7) return Fault::ErrorManifest;       // three corrupt samples: failed
    return Fault::None;
  };
  FakeServer a(store.url, kServerLayers, faults), b(store.url, kServerLayers, faults);
  const std::string out = t.path() + "/run";
  DrafterTrainConfig c = online_config(out, prompts_file(t, 10), store.url, {a.url(), b.url()});
  c.online.reload_every = 2;
  c.save_every = 2;
  const double loss = train_drafter(c);
  EXPECT_TRUE(std::isfinite(loss));

  // Exactly the good prompts, once each; 8 samples in 4 steps (--steps defaulted to 10 / 2 = 5:
  // the stream ran dry first).
  const std::map<int64_t, int> want = {{0, 1}, {1, 1}, {2, 1}, {3, 1},
                                       {4, 1}, {6, 1}, {8, 1}, {9, 1}};
  EXPECT_EQ(consumed_counts(out), want);
  std::set<int64_t> steps;
  for (const json& j : jsonl(out + "/online_consumed.jsonl")) {
    steps.insert(j["step"].get<int64_t>());
    EXPECT_EQ(j["handle"].get<std::string>().find(
                  "-p" + std::to_string(j["prompt"].get<int64_t>()) + "-a"),
              j["handle"].get<std::string>().rfind("-p"));
    EXPECT_TRUE(j["server"] == a.url() || j["server"] == b.url()) << j.dump();
  }
  EXPECT_EQ(steps, (std::set<int64_t>{1, 2, 3, 4}));

  // The journal: who was corrupt, who failed, and the 503 retried elsewhere.
  std::map<int64_t, int> corrupt;
  std::set<int64_t> failed;
  std::map<std::string, std::string> sent_to;  // handle -> server
  for (const JournalEntry& e : read_journal(out + "/online_journal.jsonl", false)) {
    if (e.kind == JournalEntry::Kind::Corrupt) ++corrupt[e.prompt];
    if (e.kind == JournalEntry::Kind::Failed) failed.insert(e.prompt);
    if (e.kind == JournalEntry::Kind::Sent)
      sent_to[e.handle.substr(e.handle.rfind("-p"))] = e.server;
  }
  EXPECT_EQ(corrupt, (std::map<int64_t, int>{{2, 1}, {3, 1}, {4, 1}, {6, 1}, {7, 3}}));
  EXPECT_EQ(failed, (std::set<int64_t>{5, 7}));
  ASSERT_TRUE(sent_to.count("-p1-a0") && sent_to.count("-p1-a1"));
  EXPECT_NE(sent_to["-p1-a0"], sent_to["-p1-a1"]);
  EXPECT_EQ(sent_to.count("-p5-a1"), 0u);  // a 400 is not retried
  EXPECT_GT(a.requests(), 0);
  EXPECT_GT(b.requests(), 0);

  // The log: corrupt samples with their handles, online fields per step, the summary.
  int corrupt_events = 0, step_lines = 0;
  json done;
  for (const json& j : jsonl(out + "/train_log.jsonl")) {
    if (j.value("event", "") == "corrupt_sample") {
      ++corrupt_events;
      EXPECT_TRUE(j.contains("handle") && j.contains("why")) << j.dump();
    }
    if (j.value("event", "") == "done") done = j;
    if (!j.contains("event")) {
      ++step_lines;
      EXPECT_TRUE(j.contains("samples_s") && j.contains("backlog") && j.contains("requests"))
          << j.dump();
    }
  }
  EXPECT_EQ(corrupt_events, 7);
  EXPECT_EQ(step_lines, 4);
  ASSERT_TRUE(done.is_object());
  EXPECT_EQ(done["online"]["trained"], 8);
  EXPECT_EQ(done["online"]["failed"], 2);

  // Hot reload at steps 2 and 4, to both servers; the drafters load.
  for (FakeServer* s : {&a, &b})
    EXPECT_EQ(s->reloads(),
              (std::vector<std::string>{fs::absolute(out + "/drafter-step-2").string(),
                                        fs::absolute(out + "/drafter-step-4").string()}));
  const DrafterConfig dc = DrafterConfig::load(out + "/drafter");
  EXPECT_EQ(dc.target_layer_ids, (std::vector<int>{0, 2}));
  EXPECT_NO_THROW(DrafterConfig::load(out + "/drafter-step-4"));

  // Nothing left in the store once the writers are done.
  ASSERT_TRUE(connector_test::eventually([&] { return a.idle() && b.idle(); }));
  EXPECT_EQ(store.left(), std::vector<std::string>{});
}

TEST_P(OnlineRun, ServersExportingOtherLayersStopTheRunNamingTheHandleAndBothLists) {
  Store store(GetParam());
  TempDir t;
  FakeServer a(store.url, {0, 1}, nullptr);
  DrafterTrainConfig c = online_config(t.path() + "/run", prompts_file(t, 4), store.url, {a.url()});
  try {
    train_drafter(c);
    FAIL() << "trained on samples without layer 3";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer_ids is [0, 1]"), std::string::npos) << m;
    EXPECT_NE(m.find("[1, 3, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("-p"), std::string::npos) << m;  // the handle
  }
}

TEST_P(OnlineRun, InitStartsFromAnExistingDrafterAndKeepsItsShape) {
  Store store(GetParam());
  TempDir t;
  FakeServer a(store.url, kServerLayers, nullptr);
  const std::string prompts = prompts_file(t, 4);
  const std::string first = t.path() + "/first", second = t.path() + "/second";
  train_drafter(online_config(first, prompts, store.url, {a.url()}));
  DrafterTrainConfig c = online_config(second, prompts, store.url, {a.url()});
  c.init = first + "/drafter";
  c.target_layers.clear();  // from the drafter
  c.layers = 3;             // ignored: the drafter has 1
  c.markov_rank = 16;       // ignored: 8
  c.steps = 1;
  train_drafter(c);
  const DrafterConfig d1 = DrafterConfig::load(first + "/drafter"),
                      d2 = DrafterConfig::load(second + "/drafter");
  EXPECT_EQ(d2.layers.num_layers, 1);
  EXPECT_EQ(d2.markov_rank, 8);
  EXPECT_EQ(d2.block_size, d1.block_size);
  EXPECT_EQ(d2.target_layer_ids, d1.target_layer_ids);
  EXPECT_EQ(consumed_counts(second), (std::map<int64_t, int>{{0, 1}, {1, 1}}));  // 1 step of 2
  // The first step's loss starts from the trained weights, not from scratch: below a fresh run's.
  auto first_loss = [](const std::string& run) {
    for (const json& j : jsonl(run + "/train_log.jsonl"))
      if (!j.contains("event")) return j["loss"].get<double>();
    return -1.0;
  };
  EXPECT_LT(first_loss(second), first_loss(first));
  // Another method than the drafter's is refused, naming --init.
  DrafterTrainConfig bad = c;
  bad.out = t.path() + "/third";
  bad.method = SpecMethod::DFlash;
  try {
    train_drafter(bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("flag --init"), std::string::npos) << e.what();
  }
  ASSERT_TRUE(connector_test::eventually([&] { return a.idle(); }));
  EXPECT_EQ(store.left(), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Stores, OnlineRun, ::testing::Values("file", "redis"));

// The sample stream on its own, as the training loop drives it (pop, trained, checkpoint), over
// two sessions: the first stopped part-way with samples queued and requests in flight, the second
// resumed from the first's last checkpoint state. A run of weeks sends millions of prompts, so
// nothing the source holds may grow with the prompts sent: once a prompt's sample is trained, or
// the prompt is given up, nothing of it stays in memory but its bit of the trained set (one range
// per gap: here the two failed prompts). Request ids stay unique across the sessions (the resumed
// attempt numbers come from the journal) and every good prompt is trained exactly once.
TEST_P(OnlineRun, TheSourceKeepsNothingPerPromptOnceItIsDoneAndIdsStayUnique) {
  Store store(GetParam());
  TempDir t;
  const FaultFn faults = [](int64_t p, int a) {
    if (p == 2 && a == 0) return Fault::WrongSampleTokens;  // corrupt once, re-requested
    if (p == 5) return Fault::Status400;                    // given up
    if (p == 7) return Fault::ErrorManifest;                // three corrupt samples: given up
    if (p == 11 && a == 0) return Fault::Status503;         // retried
    return Fault::None;
  };
  FakeServer a(store.url, kServerLayers, faults, /*delay_ms=*/20),
      b(store.url, kServerLayers, faults, 20);
  const int n = 40, batch = 2, in_flight = 4;
  OnlineOptions o;
  o.enabled = true;
  o.prompts = prompts_file(t, n);
  o.servers = {a.url(), b.url()};
  o.store = store.url;
  o.max_tokens = 6;
  o.in_flight = in_flight;
  o.sample_timeout = 1.5;
  o.request_timeout = 30;
  o.server_wait = 10;
  TargetNorm norm;
  norm.num_layers = 3;
  norm.hidden = 64;
  norm.weight.assign(64, 1.0f);
  const std::string out = t.path() + "/run";
  std::mutex mu;
  std::vector<json> starts;  // the online_start events
  const auto sink = [&](const json& e) {
    std::lock_guard<std::mutex> lock(mu);
    if (e.value("event", "") == "online_start") starts.push_back(e);
  };
  using Bookkeeping = OnlineSource::Bookkeeping;
  // Pops, trains and checkpoints (every 2 steps) `samples` samples, or until the stream ends;
  // checks the bounds after every checkpoint. Returns the last checkpoint's state.
  int64_t trained = 0;
  auto drive = [&](OnlineSource& src, int samples) {
    json state;
    for (int k = 0; k < samples; ++k) {
      std::optional<OnlineItem> it = src.pop();
      if (!it) break;
      src.trained(*it, trained++ / batch + 1);
      if (k % (2 * batch) == 2 * batch - 1) {
        state = src.checkpoint_state();
        src.checkpoint_saved();
        const Bookkeeping bk = src.bookkeeping();
        EXPECT_EQ(bk.handles_to_delete, 0);
        EXPECT_LE(bk.in_flight, in_flight);
        EXPECT_LE(bk.queued, 2 * batch);
        // Gaps: the 2 failed prompts, those taken but not yet trained (in flight or queued),
        // and after the resume the first session's in flight and queued, fetched or requested
        // again first.
        EXPECT_LE(bk.trained_ranges, 1 + 2 + 2 * (in_flight + 2 * batch));
      }
    }
    state = src.checkpoint_state();
    src.checkpoint_saved();
    return state;
  };
  json first_state;
  {
    OnlineSource src(o, out, target(), norm, {0, 2}, batch);
    src.start(false, json(), n, sink);
    first_state = drive(src, 12);
    src.stop(false);  // requests in flight aborted, samples queued but never trained
  }
  OnlineSource src(o, out, target(), norm, {0, 2}, batch);
  src.start(true, first_state, n - 12, sink);
  {
    // The resumed session accounts for every prompt once: trained, failed, fetched or requested.
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(starts.size(), 2u);
    const json& r = starts[1];
    EXPECT_EQ(r["trained"], 12);
    EXPECT_EQ(r["trained"].get<int>() + r["failed"].get<int>() + r["fetch"].get<int>() +
                  r["request"].get<int>(),
              n)
        << r.dump();
  }
  drive(src, n);
  const Bookkeeping end = src.bookkeeping();
  EXPECT_EQ(end.pending, 0);
  EXPECT_EQ(end.in_flight, 0);
  EXPECT_EQ(end.queued, 0);
  EXPECT_EQ(end.handles_to_delete, 0);
  EXPECT_EQ(end.trained_ranges, 3);  // [0, 5) [6, 7) [8, 40): the failed prompts' gaps only
  EXPECT_EQ(src.summary()["failed"], 2);
  src.stop(true);

  std::map<int64_t, int> want;
  for (int p = 0; p < n; ++p)
    if (p != 5 && p != 7) want[p] = 1;
  EXPECT_EQ(consumed_counts(out), want);
  // Every request id (and so every handle) once, across both sessions; the corrupt prompt's
  // attempts numbered on.
  std::set<std::string> sent;
  std::map<int64_t, std::set<int>> attempts;
  for (const JournalEntry& e : read_journal(out + "/online_journal.jsonl", false)) {
    if (e.kind != JournalEntry::Kind::Sent) continue;
    EXPECT_TRUE(sent.insert(e.handle).second) << "request id sent twice: " << e.handle;
    EXPECT_TRUE(attempts[e.prompt].insert(e.attempt).second) << e.handle;
  }
  // (One more each when the first session stopped with its request in flight.)
  EXPECT_GE(attempts[7].size(), 3u);
  EXPECT_GE(attempts[5].size(), 1u);
  EXPECT_GE(attempts[2].size(), 2u);
  EXPECT_GE(attempts[11].size(), 2u);
  ASSERT_TRUE(connector_test::eventually([&] { return a.idle() && b.idle(); }));
  EXPECT_EQ(store.left(), std::vector<std::string>{});
}

// --init models/demo-dspark, the committed drafter (calibrated, a 2048-id draft vocabulary): one
// online step on models/demo keeps its shape and draft vocabulary, and the engine loads the result.
TEST(OnlineInit, FineTunesTheDemoDrafterAndTheEngineLoadsIt) {
  const std::string demo = std::string(DSPARK_SOURCE_DIR) + "/models/demo",
                    drafter = std::string(DSPARK_SOURCE_DIR) + "/models/demo-dspark";
  if (!fs::exists(demo + "/config.json") || !fs::exists(drafter + "/model.safetensors"))
    GTEST_SKIP() << "models/demo or models/demo-dspark is absent";
  Store store("file");
  TempDir t;
  // demo-dspark taps 0-based layers 1, 3, 4 of the 6-layer target: vLLM 2, 4, 5, then 6.
  FakeServer a(store.url, {2, 4, 5, 6}, nullptr, 0, demo, 512);
  DrafterTrainConfig c = online_config(t.path() + "/run", prompts_file(t, 2), store.url, {a.url()});
  c.target = demo;
  c.init = drafter;
  c.target_layers.clear();
  c.anchors = 4;
  c.steps = 1;
  EXPECT_TRUE(std::isfinite(train_drafter(c)));
  const std::string out = t.path() + "/run/drafter";
  const DrafterConfig in = DrafterConfig::load(drafter), d = DrafterConfig::load(out);
  EXPECT_EQ(d.method, SpecMethod::DSpark);
  EXPECT_EQ(d.layers.num_layers, in.layers.num_layers);
  EXPECT_EQ(d.block_size, in.block_size);
  EXPECT_EQ(d.markov_rank, in.markov_rank);
  EXPECT_EQ(d.target_layer_ids, in.target_layer_ids);
  EXPECT_EQ(d.draft_vocab_size, 2048);
  EXPECT_TRUE(d.sts_temperatures.empty());  // stale after training: dropped
  auto model = Model::load(demo, LoadOptions{DType::F32});
  SpecConfig sc = SpecConfig::parse(json{{"model", out}, {"method", "dspark"}}.dump());
  EXPECT_NO_THROW(load_drafter(sc, *model, DType::F32));
  ASSERT_TRUE(connector_test::eventually([&] { return a.idle(); }));
  EXPECT_EQ(store.left(), std::vector<std::string>{});
}

// dspark-train as a child process (fork + exec: it can be SIGKILLed and reaped).
struct Child {
  pid_t pid = -1;
  int wait() {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
};
Child spawn(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  Child c;
  c.pid = ::fork();
  if (c.pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return c;
}

size_t lines_of(const std::string& path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string l; std::getline(in, l);) n += !l.empty();
  return n;
}

struct CrashCase {
  std::string store;
  int save_every;
  size_t kill_after;  // consumed lines before the SIGKILL
};

void PrintTo(const CrashCase& c, std::ostream* os) {
  *os << c.store << ", --save-every " << c.save_every << ", SIGKILL after " << c.kill_after
      << " samples";
}

class OnlineCrash : public ::testing::TestWithParam<CrashCase> {};

TEST_P(OnlineCrash, SigkillAndResumeTrainEveryPromptExactlyOnce) {
  const CrashCase cc = GetParam();
  if (cc.store == "redis" && !connector_test::redis_available())
    GTEST_SKIP() << connector_test::kRedisServer << " is absent (Debian package redis-server)";
  Store store(cc.store);
  TempDir t;
  FakeServer a(store.url, kServerLayers, nullptr, /*delay_ms=*/400),
      b(store.url, kServerLayers, nullptr, 400);
  const int n = 12;
  const std::string out = t.path() + "/run", log = t.path() + "/log";
  std::vector<std::string> args = {DSPARK_TRAIN_BIN,
                                   "drafter",
                                   "--online",
                                   "--method",
                                   "dspark",
                                   "--target",
                                   target(),
                                   "--out",
                                   out,
                                   "--prompts",
                                   prompts_file(t, n),
                                   "--servers",
                                   a.url() + "," + b.url(),
                                   "--store",
                                   store.url,
                                   "--target-layers",
                                   "0,2",
                                   "--layers",
                                   "1",
                                   "--drafts",
                                   "4",
                                   "--markov-rank",
                                   "8",
                                   "--anchors",
                                   "8",
                                   "--batch",
                                   "2",
                                   "--threads",
                                   "1",
                                   "--precision",
                                   "f32",
                                   "--max-tokens",
                                   "6",
                                   "--save-every",
                                   std::to_string(cc.save_every),
                                   "--sample-timeout",
                                   "5",
                                   "--in-flight",
                                   "2"};
  Child first = spawn(args, log);
  const bool reached = connector_test::eventually(
      [&] { return lines_of(out + "/online_consumed.jsonl") >= cc.kill_after; },
      std::chrono::seconds(120));
  ::kill(first.pid, SIGKILL);
  first.wait();
  ASSERT_TRUE(reached) << "the run never trained " << cc.kill_after << " samples:\n"
                       << dspark::testing::slurp(log);
  const size_t at_crash = lines_of(out + "/online_consumed.jsonl");
  ASSERT_LT(at_crash, size_t(n)) << "the run finished before the kill; nothing was tested";

  args.push_back("--resume");
  Child second = spawn(args, log);
  ASSERT_EQ(second.wait(), 0) << dspark::testing::slurp(log);
  std::map<int64_t, int> want;
  for (int p = 0; p < n; ++p) want[p] = 1;
  EXPECT_EQ(consumed_counts(out), want) << dspark::testing::slurp(out + "/online_consumed.jsonl");
  std::vector<json> starts;
  for (const json& j : jsonl(out + "/train_log.jsonl"))
    if (j.value("event", "") == "online_start") starts.push_back(j);
  ASSERT_EQ(starts.size(), 2u);
  // The resumed run accounts for every prompt: trained at the checkpoint, fetched again from the
  // store, or requested (again).
  const json& r = starts[1];
  EXPECT_EQ(r["trained"].get<int>() + r["fetch"].get<int>() + r["request"].get<int>(), n)
      << r.dump();
  EXPECT_LE(r["trained"].get<size_t>(), at_crash) << r.dump();
  std::cout << "killed after " << at_crash << " consumed lines; resumed with " << r.dump() << "\n";
  EXPECT_TRUE(fs::exists(out + "/drafter/config.json"));
  ASSERT_TRUE(connector_test::eventually([&] { return a.idle() && b.idle(); }));
  EXPECT_EQ(store.left(), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Crashes, OnlineCrash,
                         ::testing::Values(CrashCase{"file", 2, 5}, CrashCase{"file", 100, 3},
                                           CrashCase{"redis", 2, 7}),
                         [](const auto& info) {
                           return info.param.store + "_save" +
                                  std::to_string(info.param.save_every);
                         });

// The CLI refuses bad online flags with a message naming the flag and exit status 1.
TEST(OnlineCli, BadFlagsExitOneNamingTheFlag) {
  TempDir t;
  const std::string prompts = prompts_file(t, 2);
  struct Case {
    std::string flags, expect;
  };
  const std::vector<Case> cases = {
      {"--online --store file:" + t.path() + "/s --servers http://127.0.0.1:1 --target-layers 0",
       "--prompts"},
      {"--prompts " + prompts + " --data x", "flag --prompts needs --online"},
      {"--online --prompts " + prompts + " --store file:" + t.path() +
           "/s --servers ftp://x --target-layers 0",
       "flag --servers"},
      {"--online --prompts " + prompts + " --store file:" + t.path() +
           "/s --servers http://127.0.0.1:1",
       "--target-layers"},
      {"--online --data d --prompts " + prompts +
           " --store s --servers http://h:1 --target-layers 0",
       "flag --data"},
      {"--online --prompts " + prompts + " --store file:" + t.path() +
           "/s --servers http://127.0.0.1:1 "
           "--target-layers 0 --max-tokens 0",
       "--max-tokens"},
      {"--online --prompts " + prompts + " --store file:" + t.path() +
           "/s --servers http://127.0.0.1:1 "
           "--target-layers 0 --server-wait 0",
       "flag --servers: GET http://127.0.0.1:1/v1/models"},
  };
  for (const Case& k : cases) {
    const std::string err = t.path() + "/err";
    const std::string cmd = std::string(DSPARK_TRAIN_BIN) + " drafter --target " + target() +
                            " --out " + t.path() + "/out " + k.flags + " > /dev/null 2> " + err;
    const int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << k.flags;
    EXPECT_NE(dspark::testing::slurp(err).find(k.expect), std::string::npos)
        << k.flags << ": " << dspark::testing::slurp(err);
  }
}

}  // namespace
}  // namespace dspark::train
