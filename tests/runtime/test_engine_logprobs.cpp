// Log-probabilities from the serving engine (GenerateParams::logprobs and prompt_logprobs), in f32:
// - greedy, each generated token's logprob, rank and top entries equal a direct log-softmax of an
//   independent forward pass, and are the same with the DSpark drafter as with plain decoding
//   (drafted-and-accepted tokens' from the verify rows, the bonus token's from its row), one by
//   one, all at once, in small steps and under preemption;
// - prompt logprobs (with max_tokens 0: the prompt scored, nothing generated) equal the f32
//   forward's log-probabilities of every prompt token, so their sum over a continuation is the
//   lm-evaluation-harness log-likelihood; also in chunks beside decoding requests, twice over with
//   prefix caching on (a scored prompt skips the cache), and after preemption.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "demo_engine.h"

namespace dspark {
namespace {


using namespace dspark::testing;

constexpr double kTol = 1e-5;

// Requests here that ask for logprobs have an entry per token; the others none.
size_t reqs_logprobs(const RequestOutput& o) {
  return o.logprobs.empty() ? 0 : o.token_ids.size();
}

struct Got {
  std::vector<int32_t> tokens;
  Logprobs lp, prompt_lp;
  std::string finish_reason;
  int prompt_outputs = 0;  // outputs that carried prompt logprobs
  bool finished = false;
};

std::vector<Got> run_all(Engine& e, const std::vector<EngineRequest>& reqs,
                         const std::vector<int>& arrival = {}) {
  std::vector<Got> got(reqs.size());
  run_requests(e, reqs, arrival, [&got](size_t i, RequestOutput&& o) {
    Got& g = got[i];
    g.tokens.insert(g.tokens.end(), o.token_ids.begin(), o.token_ids.end());
    EXPECT_EQ(o.logprobs.size(), reqs_logprobs(o)) << "one entry per token";
    g.lp.append(o.logprobs);
    if (!o.prompt_logprobs.empty()) ++g.prompt_outputs;
    g.prompt_lp.append(o.prompt_logprobs);
    if (o.finished) {
      g.finished = true;
      g.finish_reason = o.finish_reason;
    }
  });
  return got;
}

// The first four demo prompts, with logprobs in their parameters.
struct LpDemo : Demo {
  LpDemo() { prompts.resize(4); }
  GenerateParams params(int max_tokens, int logprobs) const {
    GenerateParams gp = Demo::params(max_tokens);
    gp.logprobs = logprobs;
    return gp;
  }
  std::vector<int32_t> alone(const std::vector<int32_t>& prompt, const GenerateParams& gp,
                             std::vector<std::vector<double>>& rows) const {
    return Demo::alone(prompt, gp, &rows);
  }
  // Every prompt position's log-probability of the next prompt token, from one f32 forward over
  // the whole prompt (entry p - 1 for token p).
  std::vector<std::vector<double>> prompt_rows(const std::vector<int32_t>& prompt) const {
    const ModelConfig& c = target->config();
    KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 4096);
    Forward fwd(*target, kv);
    const int seq = kv.create_sequence();
    Batch b;
    for (size_t p = 0; p < prompt.size(); ++p) b.add(prompt[p], int32_t(p), seq, true);
    const ForwardOutput& out = fwd.run(b, ForwardRequest{});
    std::vector<std::vector<double>> rows;
    for (size_t p = 0; p + 1 < prompt.size(); ++p)
      rows.push_back(log_softmax(out.logits_row(int(p)), c.vocab_size));
    return rows;
  }
  std::unique_ptr<Engine> engine(EngineOptions opt, bool dspark) const {
    return Demo::engine(opt, dspark ? demo_spec(false) : "");
  }
};


// Entry i of `lp` against the reference row: the chosen token's logprob and rank, and the top
// entries (ids in the reference's order, logprobs).
void expect_entry(const Logprobs& lp, size_t i, int32_t token, const std::vector<double>& ref,
                  const std::string& where) {
  ASSERT_LT(i, lp.size()) << where;
  EXPECT_EQ(lp.token[i], token) << where;
  EXPECT_NEAR(lp.logprob[i], ref[size_t(token)], kTol) << where;
  // The rank: 1 + the tokens above it (near-ties within the tolerance may fall either way).
  int above_surely = 0, above_maybe = 0;
  for (double x : ref) {
    above_surely += x > ref[size_t(token)] + kTol;
    above_maybe += x > ref[size_t(token)] - kTol;
  }
  EXPECT_GE(lp.rank[i], above_surely + 1) << where;
  EXPECT_LE(lp.rank[i], above_maybe) << where;
  std::vector<int32_t> order(ref.size());
  for (size_t v = 0; v < ref.size(); ++v) order[v] = int32_t(v);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return ref[size_t(a)] > ref[size_t(b)]; });
  for (int k = 0; k < lp.top_n; ++k) {
    EXPECT_NEAR(lp.top_logprobs(i)[k], ref[size_t(order[size_t(k)])], kTol)
        << where << " top " << k;
    // Ids may swap only between near-ties.
    if (std::abs(ref[size_t(order[size_t(k)])] - ref[size_t(order[size_t(k) + 1])]) > 1e-4) {
      EXPECT_EQ(lp.top_tokens(i)[k], order[size_t(k)]) << where << " top " << k;
    }
    if (k > 0) {
      EXPECT_LE(lp.top_logprobs(i)[k], lp.top_logprobs(i)[k - 1]) << where;
    }
  }
}

// append_logprobs against a full sort: vocabularies that are not a multiple of its 16-value
// vector steps, ties (the lower id first), the largest values at either end, top_n 0 .. 20, and a NaN.
TEST(EngineLogprobs, AppendLogprobsMatchesAFullSort) {
  uint32_t seed = 12345;
  auto next = [&] {
    seed = seed * 1664525u + 1013904223u;
    return float(seed >> 8) / float(1u << 24);
  };
  for (int vocab : {1, 7, 16, 33, 1000, 8195}) {
    std::vector<float> x(static_cast<size_t>(vocab));
    for (float& v : x) v = std::floor(next() * 40.f) * 0.25f - 5.f;  // many ties
    x[0] = 9.f;
    x[size_t(vocab) - 1] = 9.f;
    if (vocab > 2) x[size_t(vocab) / 2] = std::numeric_limits<float>::quiet_NaN();
    double mx = -1e30, sum = 0;
    for (float v : x)
      if (v == v) mx = std::max(mx, double(v));
    for (float v : x)
      if (v == v) sum += std::exp(double(v) - mx);
    std::vector<int32_t> order;
    for (int v = 0; v < vocab; ++v)
      if (x[size_t(v)] == x[size_t(v)]) order.push_back(int32_t(v));
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return x[size_t(a)] > x[size_t(b)]; });
    for (int top_n : {0, 1, 5, 20}) {
      Logprobs lp;
      const int32_t token = int32_t(vocab / 3);
      append_logprobs(x.data(), vocab, token, top_n, lp);
      const std::string where = "vocab " + std::to_string(vocab) + ", top " + std::to_string(top_n);
      ASSERT_EQ(lp.size(), 1u) << where;
      const int n = std::min(top_n, int(order.size()));
      ASSERT_EQ(lp.top_n, std::min(top_n, vocab)) << where;
      if (x[size_t(token)] == x[size_t(token)]) {
        EXPECT_NEAR(lp.logprob[0], double(x[size_t(token)]) - mx - std::log(sum), 1e-5) << where;
        int above = 0;
        for (float v : x) above += v > x[size_t(token)];
        EXPECT_EQ(lp.rank[0], above + 1) << where;
      }
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(lp.top_tokens(0)[k], order[size_t(k)]) << where << " top " << k;
        EXPECT_NEAR(lp.top_logprobs(0)[k], double(x[size_t(order[size_t(k)])]) - mx - std::log(sum),
                    1e-5)
            << where;
      }
    }
  }
}

TEST(EngineLogprobs, F32GreedyDSparkEqualsPlainAndADirectLogSoftmax) {
  if (!have_demo_models()) GTEST_SKIP() << "models/demo and models/demo-dspark are not in this checkout";
  LpDemo demo;
  const GenerateParams gp = demo.params(40, 3);
  std::vector<std::vector<int32_t>> want;
  std::vector<std::vector<std::vector<double>>> rows(demo.prompts.size());
  std::vector<EngineRequest> reqs;
  for (size_t i = 0; i < demo.prompts.size(); ++i) {
    want.push_back(demo.alone(demo.prompts[i], gp, rows[i]));
    reqs.push_back({"r" + std::to_string(i), demo.prompts[i], gp});
  }
  // A request without logprobs beside them gets none.
  GenerateParams none = demo.params(20, -1);
  reqs.push_back({"none", demo.prompts[1], none});

  struct Case {
    const char* name;
    bool dspark;
    int max_seqs, batched_tokens;
    int64_t kv_tokens;
  };
  const std::vector<Case> cases = {
      {"plain, 1 at a time", false, 1, 2048, 0},
      {"plain, all at once", false, 8, 2048, 0},
      {"dspark, 1 at a time", true, 1, 2048, 0},
      {"dspark, all at once", true, 8, 2048, 0},
      {"dspark, 16-token steps", true, 4, 16, 0},
      {"dspark, a KV pool for two (preemption)", true, 8, 2048, 160},
  };
  std::vector<Got> plain;
  for (const Case& c : cases) {
    EngineOptions opt;
    opt.max_num_seqs = c.max_seqs;
    opt.max_num_batched_tokens = c.batched_tokens;
    opt.kv_tokens = c.kv_tokens;
    auto e = demo.engine(opt, c.dspark);
    const auto got = run_all(*e, reqs);
    if (c.dspark) {
      EXPECT_GT(e->metrics().spec_num_accepted_tokens, 0) << c.name << ": no draft was accepted";
    }
    if (c.kv_tokens > 0) {
      EXPECT_GT(e->metrics().num_preemptions, 0) << c.name;
    }
    for (size_t i = 0; i < want.size(); ++i) {
      const std::string where = std::string(c.name) + ": request " + std::to_string(i);
      ASSERT_EQ(got[i].tokens, want[i]) << where;
      ASSERT_EQ(got[i].lp.size(), want[i].size()) << where;
      EXPECT_EQ(got[i].lp.top_n, 3) << where;
      EXPECT_TRUE(got[i].prompt_lp.empty()) << where;
      for (size_t t = 0; t < want[i].size(); ++t)
        expect_entry(got[i].lp, t, want[i][t], rows[i][t], where + " token " + std::to_string(t));
      if (!plain.empty()) {
        for (size_t t = 0; t < want[i].size(); ++t)
          EXPECT_NEAR(got[i].lp.logprob[t], plain[i].lp.logprob[t], kTol) << where;
      }
    }
    EXPECT_TRUE(got.back().lp.empty()) << c.name << ": logprobs nobody asked for";
    EXPECT_FALSE(got.back().tokens.empty());
    if (plain.empty()) plain = got;
  }
}

TEST(EngineLogprobs, PromptLogprobsEqualTheF32Forward) {
  if (!have_demo_models()) GTEST_SKIP() << "models/demo and models/demo-dspark are not in this checkout";
  LpDemo demo;
  // lm-evaluation-harness's log-likelihood request: a context and a continuation, scored
  // together (max_tokens 0), the continuation's logprobs summed.
  const std::vector<int32_t> context = demo.prompts[2];
  const std::vector<int32_t> cont = demo.tok->encode("7 times 8 is 56.");
  std::vector<int32_t> scored = context;
  scored.insert(scored.end(), cont.begin(), cont.end());
  const auto ref = demo.prompt_rows(scored);
  double want_sum = 0;
  for (size_t p = context.size(); p < scored.size(); ++p) want_sum += ref[p - 1][size_t(scored[p])];

  GenerateParams score = demo.params(0, -1);
  score.prompt_logprobs = 2;
  // A longer prompt scored and then generating (with logprobs), to mix the step's row groups.
  // No stop ids: the lengths are fixed, so a small pool surely preempts.
  GenerateParams both = demo.params(40, 1);
  both.prompt_logprobs = 0;
  both.stop_token_ids.clear();
  GenerateParams decoding = demo.params(60, -1);
  decoding.stop_token_ids.clear();
  const auto ref_long = demo.prompt_rows(demo.prompts[3]);
  std::vector<EngineRequest> reqs = {{"score", scored, score},
                                     {"decoding", demo.prompts[0], decoding},
                                     {"both", demo.prompts[3], both},
                                     {"score again", scored, score}};
  const std::vector<int> arrival = {4, 0, 6, 40};

  struct Case {
    const char* name;
    bool dspark, prefix_caching;
    int batched_tokens;
    int64_t kv_tokens;
  };
  const std::vector<Case> cases = {
      {"plain", false, false, 2048, 0},
      {"dspark, prefix caching", true, true, 2048, 0},
      {"dspark, 16-token steps, prefix caching", true, true, 16, 0},
      {"plain, 7-token steps", false, false, 7, 0},
      {"dspark, a small KV pool (preemption)", true, false, 2048, 120},
  };
  for (const Case& c : cases) {
    EngineOptions opt;
    opt.max_num_seqs = 4;
    opt.enable_prefix_caching = c.prefix_caching;
    opt.max_num_batched_tokens = c.batched_tokens;
    opt.kv_tokens = c.kv_tokens;
    auto e = demo.engine(opt, c.dspark);
    const auto got = run_all(*e, reqs, arrival);
    for (size_t k : {size_t(0), size_t(3)}) {
      const Got& g = got[k];
      const std::string where = std::string(c.name) + ": " + reqs[k].request_id;
      EXPECT_EQ(g.finish_reason, "length") << where;
      EXPECT_TRUE(g.tokens.empty()) << where << ": max_tokens 0 generated";
      EXPECT_EQ(g.prompt_outputs, 1) << where;
      ASSERT_EQ(g.prompt_lp.size(), scored.size() - 1) << where;
      EXPECT_EQ(g.prompt_lp.top_n, 2) << where;
      double sum = 0;
      for (size_t p = 1; p < scored.size(); ++p) {
        expect_entry(g.prompt_lp, p - 1, scored[p], ref[p - 1],
                     where + " position " + std::to_string(p));
        if (p >= context.size()) sum += g.prompt_lp.logprob[p - 1];
      }
      EXPECT_NEAR(sum, want_sum, 1e-4) << where << ": the continuation's log-likelihood";
    }
    const Got& b = got[2];
    ASSERT_EQ(b.prompt_lp.size(), demo.prompts[3].size() - 1) << c.name;
    for (size_t p = 1; p < demo.prompts[3].size(); ++p)
      expect_entry(b.prompt_lp, p - 1, demo.prompts[3][p], ref_long[p - 1],
                   std::string(c.name) + ": both, position " + std::to_string(p));
    EXPECT_EQ(b.lp.size(), b.tokens.size()) << c.name;
    EXPECT_FALSE(b.tokens.empty()) << c.name;
    EXPECT_TRUE(got[1].prompt_lp.empty() && got[1].lp.empty()) << c.name;
    if (c.prefix_caching) {
      EXPECT_EQ(e->metrics().prefix_cache_hits, 0) << c.name << ": a scored prompt used the cache";
    }
    if (c.kv_tokens > 0) {
      EXPECT_GT(e->metrics().num_preemptions, 0) << c.name;
    }
    EXPECT_EQ(e->metrics().kv_cache_usage_perc, 0.0) << c.name;
  }
}

TEST(EngineLogprobs, MaxTokensZeroNeedsPromptLogprobs) {
  if (!have_demo_models()) GTEST_SKIP() << "models/demo is not in this checkout";
  LpDemo demo;
  auto e = demo.engine(EngineOptions{}, false);
  GenerateParams gp = demo.params(0, -1);
  try {
    e->submit({"zero", demo.prompts[0], gp}, nullptr);
    ADD_FAILURE() << "max_tokens 0 without prompt_logprobs was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.param(), "max_tokens");
  }
  for (int bad : {-2, 21}) {
    for (bool prompt : {false, true}) {
      GenerateParams p = demo.params(4, -1);
      (prompt ? p.prompt_logprobs : p.logprobs) = bad;
      try {
        e->submit({"bad", demo.prompts[0], p}, nullptr);
        ADD_FAILURE() << "logprobs " << bad << " was accepted";
      } catch (const Error& err) {
        EXPECT_EQ(err.param(), prompt ? "prompt_logprobs" : "logprobs");
      }
    }
  }
}

}  // namespace
}  // namespace dspark
