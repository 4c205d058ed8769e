// The serving engine: continuous batching with speculative decoding across requests.
// - f32 greedy output of every request equals `generate` alone, at every concurrency, with
//   chunked prefill, staggered arrivals and preemption;
// - a sampled request's output depends only on the request (seed-and-position keyed streams);
// - concurrent sampled requests at mixed temperatures, with the batch-aware length policy, follow
//   the target's exact distribution, and a length policy that looks at the token it admits fails
//   that test;
// - aborts free the request's KV blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "../data/test_util.h"
#include "../spec_decode/fixtures.h"
#include "../spec_decode/stats.h"
#include "core/error.h"
#include "demo_engine.h"
#include "model/forward.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/spec_generate.h"
#include "spec_decode/verify_length_prefix.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;
using namespace dspark::testing;
using json = nlohmann::json;

struct Collected {
  std::vector<int32_t> tokens;
  std::string text, finish_reason;
  int outputs = 0;
  int cached_tokens = 0;
  bool finished = false;
};

// Every request's tokens, text and finish, stepping the engine on this thread (run_requests).
std::vector<Collected> run_all(Engine& e, const std::vector<EngineRequest>& reqs,
                               const std::vector<int>& arrival = {}) {
  std::vector<Collected> got(reqs.size());
  run_requests(e, reqs, arrival, [&got](size_t i, RequestOutput&& o) {
    Collected& c = got[i];
    c.tokens.insert(c.tokens.end(), o.token_ids.begin(), o.token_ids.end());
    c.text += o.text;
    c.cached_tokens = o.cached_tokens;
    ++c.outputs;
    if (o.finished) {
      c.finished = true;
      c.finish_reason = o.finish_reason;
    }
  });
  return got;
}

// ---------------------------------------------------------------- the demo models, f32 greedy

// Twelve lines about a store's apples: a document two questions share.
std::string store_document() {
  std::string doc;
  for (int i = 0; i < 12; ++i)
    doc += "Line " + std::to_string(i) + ": the store sells " + std::to_string(3 + i) +
           " apples for " + std::to_string(2 * i + 1) + " dollars. ";
  return doc;
}

TEST(Engine, F32GreedyEqualsPlainDecodingAloneAtEveryConcurrency) {
  if (!fs::exists(kModels + "/demo/config.json") ||
      !fs::exists(kModels + "/demo-dspark/config.json"))
    GTEST_SKIP() << "models/demo and models/demo-dspark are not in this checkout";
  Demo demo;
  const GenerateParams gp = demo.params(40);
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : demo.prompts) want.push_back(demo.alone(p, gp));
  std::vector<EngineRequest> reqs;
  for (size_t i = 0; i < demo.prompts.size(); ++i)
    reqs.push_back({"r" + std::to_string(i), demo.prompts[i], gp});

  struct Case {
    const char* name;
    std::string spec;
    int max_seqs, batched_tokens;
    int64_t kv_tokens;
    bool staggered;
    bool prefill_first = false;
  };
  const std::vector<Case> cases = {
      {"plain, 1 at a time", "", 1, 2048, 0, false},
      {"plain, all at once", "", 6, 2048, 0, false},
      {"dspark full blocks, all at once", demo_spec(false), 6, 2048, 0, false},
      {"dspark adaptive, all at once", demo_spec(true), 6, 2048, 0, false},
      {"dspark, 16-token steps (chunked prefill beside decoding)", demo_spec(false), 4, 16, 0,
       true},
      {"dspark, staggered arrivals", demo_spec(true), 3, 64, 0, true},
      {"dspark, a KV pool for two (preemption)", demo_spec(false), 6, 2048, 160, false},
      {"plain, a KV pool for two (preemption)", "", 6, 2048, 128, false},
      {"dspark adaptive, prefill-first steps, staggered", demo_spec(true), 4, 64, 0, true, true},
      {"n-gram, all at once",
       R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3})",
       6, 2048, 0, false},
  };
  for (const Case& c : cases) {
    EngineOptions opt;
    opt.max_num_seqs = c.max_seqs;
    opt.max_num_batched_tokens = c.batched_tokens;
    opt.kv_tokens = c.kv_tokens;
    opt.prefill_first = c.prefill_first;
    auto e = demo.engine(opt, c.spec);
    std::vector<int> arrival;
    if (c.staggered)
      for (size_t i = 0; i < reqs.size(); ++i) arrival.push_back(int(i) * 3);
    const auto got = run_all(*e, reqs, arrival);
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got[i].tokens, want[i]) << c.name << ": request " << i;
    const EngineMetrics m = e->metrics();
    if (c.kv_tokens > 0) {
      EXPECT_GT(m.num_preemptions, 0) << c.name << ": the small pool never preempted";
    }
    if (!c.spec.empty()) {
      EXPECT_GT(m.spec_num_accepted_tokens, 0) << c.name;
    }
    EXPECT_EQ(m.num_requests_running, 0);
    EXPECT_EQ(m.kv_cache_usage_perc, 0.0)
        << c.name << ": blocks still held after every request ended";
  }
}

// Prefix caching: a second question about one document, a chat's next turn and a repeated prompt
// start from their cached blocks, and f32 greedy output stays what plain decoding gives, for
// plain, DSpark and n-gram engines, with requests one after another, all at once (one prefix
// prefilled twice side by side) and in a pool so small that shared blocks meet eviction and
// preemption. A repeated prompt drafts exactly as the first time: the drafter's context came back
// with the target's cache.
TEST(Engine, PrefixCachingKeepsF32OutputAndSkipsCachedPrefixes) {
  if (!fs::exists(kModels + "/demo-dspark/config.json"))
    GTEST_SKIP() << "models/demo-dspark is not in this checkout";
  Demo demo;
  const GenerateParams gp = demo.params(24);
  const ChatFormat fmt = detect_chat_format(*demo.tok);
  const std::string doc = store_document();
  auto chat = [&](std::vector<ChatMessage> m) {
    return demo.tok->encode(apply_chat_template(fmt, m, true));
  };
  const auto q1 = chat({{"user", doc + "How many apples are on line 3?"}});
  const auto q2 = chat({{"user", doc + "What do the apples on line 7 cost?"}});
  const auto t1 = chat({{"user", "What is 7 times 8?"}});
  const std::vector<int32_t> a1 = demo.alone(t1, gp);
  const auto t2 = chat({{"user", "What is 7 times 8?"},
                        {"assistant", demo.tok->decode(a1)},
                        {"user", "And 7 times 9?"}});
  const std::vector<std::vector<int32_t>> prompts = {q1, q2, t1, t2, q1};
  std::vector<EngineRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    reqs.push_back({"r" + std::to_string(i), prompts[i], gp});
    want.push_back(demo.alone(prompts[i], gp));
    prompt_tokens += int64_t(prompts[i].size());
  }
  const std::string ngram =
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3})";
  struct Case {
    const char* name;
    std::string spec;
    bool one_by_one;
    int64_t kv_tokens;
  };
  const std::vector<Case> cases = {
      {"plain, one after another", "", true, 0},
      {"dspark, one after another", demo_spec(false), true, 0},
      {"n-gram, one after another", ngram, true, 0},
      {"dspark, all at once", demo_spec(false), false, 0},
      {"dspark, all at once in a pool for one long request", demo_spec(false), false,
       int64_t(q2.size()) + 24 + 3 * kKvBlock},
  };
  for (const Case& c : cases) {
    EngineOptions opt;
    opt.enable_prefix_caching = true;
    opt.max_num_seqs = 5;
    opt.kv_tokens = c.kv_tokens;
    auto e = demo.engine(opt, c.spec);
    std::vector<Collected> got;
    std::vector<int64_t> accepted;  // drafts accepted, per request (one after another)
    if (c.one_by_one) {
      for (const EngineRequest& r : reqs) {
        const int64_t before = e->metrics().spec_num_accepted_tokens;
        got.push_back(run_all(*e, {r})[0]);
        accepted.push_back(e->metrics().spec_num_accepted_tokens - before);
      }
    } else {
      got = run_all(*e, reqs);
    }
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(got[i].tokens, want[i]) << c.name << ": request " << i;
    const EngineMetrics m = e->metrics();
    EXPECT_EQ(m.prefix_cache_queries, prompt_tokens) << c.name;
    EXPECT_EQ(m.prompt_tokens, prompt_tokens) << c.name;
    EXPECT_EQ(m.kv_cache_usage_perc, 0.0) << c.name;
    if (c.kv_tokens > 0) {
      EXPECT_GT(m.num_preemptions, 0) << c.name;
    }
    if (!c.one_by_one) continue;
    int64_t hits = 0;
    for (const Collected& g : got) hits += g.cached_tokens;
    EXPECT_EQ(m.prefix_cache_hits, hits) << c.name;
    EXPECT_EQ(got[0].cached_tokens, 0) << c.name;
    // The document's whole blocks, the first turn's, and all of the repeat but its last block.
    const int doc_blocks = int(q1.size()) / kKvBlock - 2;
    EXPECT_GE(got[1].cached_tokens, doc_blocks * kKvBlock) << c.name;
    EXPECT_GE(got[3].cached_tokens, int(t1.size()) / kKvBlock * kKvBlock) << c.name;
    EXPECT_EQ(got[4].cached_tokens, (int(q1.size()) - 1) / kKvBlock * kKvBlock) << c.name;
    if (!c.spec.empty()) {
      EXPECT_EQ(accepted[4], accepted[0]) << c.name << ": the repeat drafts differently";
    }
  }
  // Off, nothing is cached or counted.
  EngineOptions opt;
  auto e = demo.engine(opt, demo_spec(false));
  const auto got = run_all(*e, {reqs[0], reqs[4]}, {0, 200});
  EXPECT_EQ(got[1].cached_tokens, 0);
  EXPECT_EQ(e->metrics().prefix_cache_queries, 0);
}

// Drafts only while *draft is true, full blocks when it does.
class SwitchedPolicy : public VerifyLengthPolicy {
 public:
  explicit SwitchedPolicy(const bool* draft) : draft_(draft) {}
  void choose(std::span<const Draft* const> drafts, std::span<int> lengths) override {
    for (size_t r = 0; r < drafts.size(); ++r) lengths[r] = int(drafts[r]->tokens.size());
  }
  bool should_draft(int) override { return *draft_; }

 private:
  const bool* draft_;
};

// The drafter's context waits until a request drafts: a chat turn run with plain steps only (as
// under load) costs the drafter nothing, and its rows are parked when it ends, so the next turn
// starts from the target's whole cached prefix (not from where the drafter's context stopped)
// and drafts from those rows exactly as a drafter that took every row along the way.
TEST(Engine, DrafterContextWaitsUntilARequestDrafts) {
  if (!fs::exists(kModels + "/demo-dspark/config.json"))
    GTEST_SKIP() << "models/demo-dspark is not in this checkout";
  Demo demo;
  const GenerateParams gp = demo.params(24);
  const ChatFormat fmt = detect_chat_format(*demo.tok);
  auto chat = [&](std::vector<ChatMessage> m) {
    return demo.tok->encode(apply_chat_template(fmt, m, true));
  };
  const auto t1 = chat({{"user", "What is 7 times 8?"}});
  const std::vector<int32_t> a1 = demo.alone(t1, gp);
  const auto t2 = chat({{"user", "What is 7 times 8?"},
                        {"assistant", demo.tok->decode(a1)},
                        {"user", "And 7 times 9?"}});
  SpecConfig sc = SpecConfig::parse(demo_spec(false));
  bool draft = true;
  auto engine = [&](bool caching) {
    EngineOptions opt;
    opt.kv_dtype = DType::F32;
    opt.enable_prefix_caching = caching;
    return std::make_unique<Engine>(*demo.target, *demo.tok, opt,
                                    load_drafter(sc, *demo.target, DType::F32), sc,
                                    std::make_unique<SwitchedPolicy>(&draft));
  };
  // The reference: turn 2 alone, drafting from its first step, its drafter taking every row.
  auto fresh = engine(false);
  EXPECT_EQ(run_all(*fresh, {{"t2", t2, gp}})[0].tokens, demo.alone(t2, gp));
  const int64_t want_accepted = fresh->metrics().spec_num_accepted_tokens;
  ASSERT_GT(want_accepted, 0);

  auto e = engine(true);
  draft = false;  // turn 1 in plain steps only
  EXPECT_EQ(run_all(*e, {{"t1", t1, gp}})[0].tokens, a1);
  EXPECT_EQ(e->metrics().drafter_context_rows, 0) << "plain steps must not feed the drafter";
  EXPECT_GT(e->metrics().spec_plain_steps, 0);
  draft = true;
  const Collected got = run_all(*e, {{"t2", t2, gp}})[0];
  EXPECT_EQ(got.tokens, demo.alone(t2, gp));
  // Turn 1 kept t1 and a1 but its last token (emitted, never computed) in the target's cache.
  std::vector<int32_t> turn1 = t1;
  turn1.insert(turn1.end(), a1.begin(), a1.end() - 1);
  const size_t common =
      size_t(std::mismatch(turn1.begin(), turn1.end(), t2.begin()).first - turn1.begin());
  const int cached = int(std::min(common, t2.size() - 1)) / kKvBlock * kKvBlock;
  ASSERT_GT(cached, int(t1.size()) / kKvBlock * kKvBlock) << "(the turns share too little)";
  EXPECT_EQ(got.cached_tokens, cached) << "turn 2 must start from the target's whole cache";
  EXPECT_EQ(e->metrics().spec_num_accepted_tokens, want_accepted)
      << "the parked rows must give the drafter the context it would have built";
  EXPECT_GE(e->metrics().drafter_context_rows, cached);

  // Two requests continue the same parked rows at once: the first takes them as its own, and the
  // second finds them held by the first; both start from the target's whole cache.
  auto twice = engine(true);
  draft = false;
  EXPECT_EQ(run_all(*twice, {{"t1", t1, gp}})[0].tokens, a1);
  draft = true;
  const auto both = run_all(*twice, {{"a", t2, gp}, {"b", t2, gp}});
  for (const Collected& b : both) {
    EXPECT_EQ(b.tokens, got.tokens);
    EXPECT_EQ(b.cached_tokens, cached) << "a request continuing parked rows at once with another";
  }

  // A document that a running request holds (plain steps, its rows not yet the drafter's): a
  // second question about it starts from the target's cache as well, those rows going to the
  // drafter then.
  const std::string doc = store_document();
  const auto q1 = chat({{"user", doc + "How many apples are on line 3?"}});
  const auto q2 = chat({{"user", doc + "What do the apples on line 7 cost?"}});
  draft = false;
  auto shared = engine(true);
  const auto two = run_all(*shared, {{"q1", q1, gp}, {"q2", q2, gp}}, {0, 3});
  EXPECT_EQ(two[0].tokens, demo.alone(q1, gp));
  EXPECT_EQ(two[1].tokens, demo.alone(q2, gp));
  EXPECT_GE(two[1].cached_tokens, (int(q1.size()) / kKvBlock - 2) * kKvBlock);
  EXPECT_GT(shared->metrics().drafter_context_rows, 0);
}

// An fp8 KV cache (either format) keeps speculative greedy output equal to plain greedy output
// with the same cache, alone and all at once, with prefix caching: attention sums each row in the
// same order whatever the tile holds, and a position's scale depends on that position only.
TEST(Engine, Fp8KvCacheKeepsSpeculativeGreedyEqualToPlain) {
  if (!fs::exists(kModels + "/demo-dspark/config.json"))
    GTEST_SKIP() << "models/demo-dspark is not in this checkout";
  Demo demo;
  const GenerateParams gp = demo.params(32);
  std::vector<EngineRequest> reqs;
  for (size_t i = 0; i < demo.prompts.size(); ++i)
    reqs.push_back({"r" + std::to_string(i), demo.prompts[i], gp});
  for (DType kv : {DType::F8_E4M3, DType::F8_E5M2}) {
    EngineOptions one;
    one.max_num_seqs = 1;
    const auto plain = run_all(*demo.engine(one, "", kv), reqs);
    EngineOptions all;
    all.max_num_seqs = 6;
    all.enable_prefix_caching = true;
    auto e = demo.engine(all, demo_spec(false), kv);
    const auto spec = run_all(*e, reqs);
    for (size_t i = 0; i < reqs.size(); ++i)
      EXPECT_EQ(spec[i].tokens, plain[i].tokens) << dtype_name(kv) << ": request " << i;
    EXPECT_GT(e->metrics().spec_num_accepted_tokens, 0) << dtype_name(kv);
  }
}

TEST(Engine, SampledOutputDependsOnlyOnTheRequest) {
  if (!fs::exists(kModels + "/demo-dspark/config.json"))
    GTEST_SKIP() << "models/demo-dspark is not in this checkout";
  Demo demo;
  GenerateParams gp = demo.params(32);
  gp.sampling.temperature = 0.8f;
  gp.sampling.top_p = 0.95f;
  gp.sampling.seed = 1234;
  const EngineRequest probe{"probe", demo.prompts[0], gp};
  std::vector<EngineRequest> crowd = {probe};
  for (size_t i = 1; i < demo.prompts.size(); ++i) {
    GenerateParams o = gp;
    o.sampling.temperature = i % 2 ? 0.f : 1.1f;
    o.sampling.seed = 99 + i;
    crowd.push_back({"other", demo.prompts[i], o});
  }
  for (const std::string& spec : {std::string(), demo_spec(false)}) {
    EngineOptions opt;
    opt.max_num_seqs = 8;
    auto alone = run_all(*demo.engine(opt, spec), {probe});
    auto together = run_all(*demo.engine(opt, spec), crowd, {0, 0, 1, 2, 2, 5});
    EXPECT_EQ(together[0].tokens, alone[0].tokens) << (spec.empty() ? "plain" : "dspark");
    EXPECT_EQ(together[0].text, alone[0].text);
  }
}

TEST(Engine, AbortFreesTheRequestsBlocks) {
  if (!fs::exists(kModels + "/demo-dspark/config.json"))
    GTEST_SKIP() << "models/demo-dspark is not in this checkout";
  Demo demo;
  EngineOptions opt;
  auto e = demo.engine(opt, demo_spec(false));
  GenerateParams gp = demo.params(400);
  gp.stop_token_ids.clear();
  std::string reason;
  int outputs = 0;
  const uint64_t h = e->submit({"long", demo.prompts[3], gp}, [&](RequestOutput&& o) {
    ++outputs;
    if (o.finished) reason = o.finish_reason;
  });
  for (int i = 0; i < 4; ++i) e->step();
  EXPECT_GT(e->metrics().kv_cache_usage_perc, 0.0);
  e->abort(h);
  while (e->step()) {
  }
  EXPECT_EQ(reason, "abort");
  EXPECT_EQ(e->metrics().kv_cache_usage_perc, 0.0);
  EXPECT_EQ(e->metrics().request_success["abort"], 1);
}

TEST(Engine, RefusesRequestsItCanNeverRun) {
  if (!fs::exists(kModels + "/demo/config.json"))
    GTEST_SKIP() << "models/demo is not in this checkout";
  Demo demo;
  EngineOptions opt;
  opt.max_model_len = 64;
  auto e = demo.engine(opt, "");
  auto err = [&](EngineRequest r) {
    try {
      e->submit(std::move(r), nullptr);
    } catch (const std::exception& x) {
      return std::string(x.what());
    }
    return std::string();
  };
  GenerateParams gp = demo.params(8);
  EXPECT_NE(err({"a", std::vector<int32_t>(70, 5), gp}).find("70"), std::string::npos);
  EXPECT_NE(err({"b", {}, gp}).find("prompt"), std::string::npos);
  EXPECT_NE(err({"c", {1, 2, 99999}, gp}).find("99999"), std::string::npos);
  gp.max_tokens = 60;
  EXPECT_NE(err({"d", std::vector<int32_t>(10, 5), gp}).find("max_tokens"), std::string::npos);
  gp.max_tokens = 8;
  gp.sampling.top_p = 0;
  EXPECT_NE(err({"e", {1, 2}, gp}).find("top_p"), std::string::npos);
}

// A refusal crosses to the server as a typed value: its kind and the request field at fault (the
// server answers from them, never from the message).
TEST(Engine, RefusalsCarryTheirKindAndField) {
  if (!fs::exists(kModels + "/demo/config.json"))
    GTEST_SKIP() << "models/demo is not in this checkout";
  Demo demo;
  EngineOptions opt;
  opt.max_model_len = 64;
  auto e = demo.engine(opt, "");
  using Refusal = std::pair<ErrorKind, std::string>;
  auto refusal = [&](EngineRequest r) -> Refusal {
    try {
      e->submit(std::move(r), nullptr);
    } catch (const Error& x) {
      return {x.kind(), x.param()};
    }
    return {ErrorKind::InvalidRequest, "(accepted)"};
  };
  const ErrorKind invalid = ErrorKind::InvalidRequest, context = ErrorKind::ContextLengthExceeded;
  GenerateParams gp = demo.params(8);
  EXPECT_EQ(refusal({"a", std::vector<int32_t>(70, 5), gp}), Refusal(context, "prompt"));
  EXPECT_EQ(refusal({"b", {}, gp}), Refusal(invalid, "prompt"));
  EXPECT_EQ(refusal({"c", {1, 2, 99999}, gp}), Refusal(invalid, "prompt"));
  gp.max_tokens = 60;
  EXPECT_EQ(refusal({"d", std::vector<int32_t>(10, 5), gp}), Refusal(context, "max_tokens"));
  gp.max_tokens = 0;
  EXPECT_EQ(refusal({"e", {1, 2}, gp}), Refusal(invalid, "max_tokens"));
  gp.max_tokens = 8;
  gp.sampling.top_p = 0;
  EXPECT_EQ(refusal({"f", {1, 2}, gp}), Refusal(invalid, "top_p"));
  gp.sampling.top_p = 1;
  gp.stop_strings = {""};
  EXPECT_EQ(refusal({"g", {1, 2}, gp}), Refusal(invalid, "stop"));
  gp.stop_strings.clear();
  e->stop();
  EXPECT_EQ(refusal({"h", {1, 2}, gp}), Refusal(ErrorKind::Unavailable, ""));
}

// ---------------------------------------------------------------- batched losslessness

// Looks at the token it admits: verifies drafts while each is the most likely token of its q
// (a confident-looking draft), which lets x_k decide whether x_k is verified.
class TokenPeekingPolicy : public VerifyLengthPolicy {
 public:
  void choose(std::span<const Draft* const> drafts, std::span<int> lengths) override {
    for (size_t r = 0; r < drafts.size(); ++r) {
      const Draft& d = *drafts[r];
      int l = 0;
      while (l < int(d.tokens.size()) && !d.q.empty()) {
        const float* q = d.q_row(l);
        if (std::max_element(q, q + d.vocab) - q != d.tokens[size_t(l)]) break;
        ++l;
      }
      lengths[r] = l;
    }
  }
};

struct Tiny {
  fs::path dir = temp_dir("engine");
  ModelConfig cfg = tiny_target(6);
  std::unique_ptr<Model> target =
      Model::build(cfg, *random_source(21, 0.5f), LoadOptions{DType::F32});
  std::unique_ptr<Tokenizer> tok;
  Tiny() {
    std::ofstream(dir / "tokenizer.json") << tiny_tokenizer_json();
    tok = Tokenizer::from_file((dir / "tokenizer.json").string());
  }
  ~Tiny() { fs::remove_all(dir); }
};

// Requests of two temperatures (and a greedy one) share every step; each class's first three
// tokens are tested against the target's exact joint distribution.
std::map<int, ChiSquare> batched_fit(Tiny& t, std::unique_ptr<VerifyLengthPolicy> policy,
                                     bool block, int groups, EngineMetrics* metrics_out) {
  DrafterSpec s;
  s.std = 0.6f;
  write_dspark((t.dir / "dspark").string(), t.cfg, s);
  json j = {{"model", (t.dir / "dspark").string()},
            {"num_speculative_tokens", 3},
            {"draft_sample_method", "probabilistic"}};
  if (block) j["rejection_sample_method"] = "block";
  SpecConfig sc = SpecConfig::parse(j.dump());
  EngineOptions opt;
  opt.max_num_seqs = 5;
  opt.kv_dtype = DType::F32;
  Engine e(*t.target, *t.tok, opt, load_drafter(sc, *t.target, DType::F32), sc, std::move(policy));
  const std::vector<int32_t> prompt = {1, 4, 2};
  SamplingParams hot, warm;
  hot.temperature = 0.9f;
  hot.top_k = 5;
  warm.temperature = 0.6f;
  const std::vector<SamplingParams> classes = {hot, warm};
  const int n = 3, V = t.cfg.vocab_size;
  std::vector<std::vector<int64_t>> counts(classes.size(),
                                           std::vector<int64_t>(size_t(V * V * V), 0));
  GenerateParams greedy_gp;
  greedy_gp.max_tokens = n;
  std::vector<int32_t> greedy_want;
  {
    KvCache kv(t.cfg.num_layers, t.cfg.num_kv_heads, t.cfg.head_dim, DType::F32, 1 << 12);
    Forward fwd(*t.target, kv);
    greedy_want = generate(fwd, *t.tok, prompt, greedy_gp).tokens;
  }
  for (int g = 0; g < groups; ++g) {
    std::vector<EngineRequest> reqs;
    for (int c = 0; c < 4; ++c) {
      GenerateParams gp;
      gp.max_tokens = n + 4;  // rounds of up to 3 drafts; the first n tokens are counted
      gp.sampling = classes[size_t(c % 2)];
      gp.sampling.seed = uint64_t(g) * 7919 + uint64_t(c) * 104729 + 17;
      reqs.push_back({"", prompt, gp});
    }
    reqs.push_back({"greedy", prompt, greedy_gp});
    const auto got = run_all(e, reqs);
    for (int c = 0; c < 4; ++c) {
      if (got[size_t(c)].tokens.size() != size_t(n + 4)) {
        ADD_FAILURE() << "group " << g << " request " << c << " gave "
                      << got[size_t(c)].tokens.size() << " tokens";
        return {};
      }
      size_t cell = 0;
      for (int i = 0; i < n; ++i)
        cell = cell * size_t(V) + size_t(got[size_t(c)].tokens[size_t(i)]);
      ++counts[size_t(c % 2)][cell];
    }
    EXPECT_EQ(got[4].tokens, greedy_want)
        << "group " << g << ": the greedy request beside sampled ones";
  }
  std::map<int, ChiSquare> fit;
  for (size_t c = 0; c < classes.size(); ++c)
    fit[int(c)] = chi_square(counts[c], exact_joint(*t.target, prompt, classes[c], n));
  if (metrics_out) *metrics_out = e.metrics();
  return fit;
}

TEST(EngineLossless, ConcurrentSampledRequestsFollowTheTargetWithTheBatchLengthPolicy) {
  for (bool block : {false, true}) {
    Tiny t;
    // A cost curve on which the batch length policy cuts blocks depending on everyone's
    // confidences.
    std::vector<double> sps{0.0};
    for (int b = 1; b <= 40; ++b) sps.push_back(1.0 / (1.0 + 0.06 * b));
    auto sched = std::make_unique<PrefixLengthPolicy>(sps);
    EngineMetrics m;
    const auto fit = batched_fit(t, std::move(sched), block, 3500, &m);
    ASSERT_EQ(fit.size(), 2u);
    for (const auto& [c, cs] : fit)
      EXPECT_GT(cs.p_value, 0.001) << (block ? "block" : "token-level") << " class " << c
                                   << ": chi2 " << cs.statistic << " dof " << cs.dof;
    // The policy chose several lengths, and drafts were both accepted and rejected.
    int lengths_used = 0;
    for (int64_t n : m.spec_verify_length_hist) lengths_used += n > 0;
    EXPECT_GE(lengths_used, 3) << "the policy always chose the same length";
    EXPECT_GT(m.spec_num_accepted_tokens, 0);
    EXPECT_LT(m.spec_num_accepted_tokens, m.spec_num_draft_tokens);
  }
}

TEST(EngineLossless, ALengthPolicyThatLooksAtTheTokenFailsTheSameTest) {
  Tiny t;
  const auto fit = batched_fit(t, std::make_unique<TokenPeekingPolicy>(), false, 3500, nullptr);
  ASSERT_EQ(fit.size(), 2u);
  double worst = 1;
  for (const auto& [c, cs] : fit) worst = std::min(worst, cs.p_value);
  EXPECT_LT(worst, 1e-6) << "a length policy that looks at the drafted token went undetected";
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// Per-drafter-version counters keep the most recent versions only: an online trainer reloads the
// drafter for weeks, and each version would otherwise add an entry and a /metrics label set.
TEST(EngineMetrics, PerDrafterVersionsStayBounded) {
  EngineMetrics m;
  const int n = int(EngineMetrics::kMaxDrafterVersions);
  for (int v = 1; v <= 3 * n; ++v) {
    ++m.per_drafter(v).drafts;
    ++m.per_drafter(v).drafts;
    ASSERT_LE(m.spec_by_drafter.size(), EngineMetrics::kMaxDrafterVersions) << "version " << v;
  }
  EXPECT_EQ(m.spec_by_drafter.begin()->first, 2 * n + 1);  // the newest n versions
  EXPECT_EQ(m.spec_by_drafter.rbegin()->first, 3 * n);
  EXPECT_EQ(m.spec_by_drafter.at(3 * n).drafts, 2);
  // A request still on a dropped version counts in no kept version.
  ++m.per_drafter(1).drafts;
  EXPECT_EQ(m.spec_by_drafter.count(1), 0u);
  EXPECT_EQ(m.spec_by_drafter.size(), EngineMetrics::kMaxDrafterVersions);
  EXPECT_EQ(m.dropped_versions.drafts, 1);
}

}  // namespace
}  // namespace dspark
