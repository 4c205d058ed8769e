// logit_bias and the presence, frequency and repetition penalties (LogitsProcessor): the
// processor against the formulas written out here, and speculative decoding with them lossless:
// greedy output token-identical to plain decoding, sampled output fitting the exact penalised
// distribution (chi-square), and a verification that processes every row of a round as if the
// drafts before it were not there failing that fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <iostream>
#include <random>

#include "core/error.h"
#include "harness.h"
#include "runtime/engine.h"
#include "sample/json_constraint.h"
#include "sample/logits_processor.h"
#include "spec_decode/verify_length.h"

namespace dspark {
namespace {

using namespace dspark::testing;

// vLLM's order, written out: the bias, then the repetition penalty on tokens of the prompt or the
// output, then the frequency and presence penalties on the output's tokens.
void reference_process(float* l, int vocab, const LogitsParams& lp, const std::vector<int32_t>& prompt,
                       const std::vector<int32_t>& output) {
  for (const auto& [id, b] : lp.logit_bias) l[id] += b;
  for (int v = 0; v < vocab; ++v) {
    const bool in_prompt = std::count(prompt.begin(), prompt.end(), v) > 0;
    const int c = int(std::count(output.begin(), output.end(), v));
    if (lp.repetition_penalty != 1.f && (in_prompt || c > 0))
      l[v] = l[v] > 0 ? l[v] / lp.repetition_penalty : l[v] * lp.repetition_penalty;
    l[v] -= lp.frequency_penalty * float(c) + (c > 0 ? lp.presence_penalty : 0.f);
  }
}

LogitsParams strong_penalties() {
  LogitsParams lp;
  lp.presence_penalty = 0.6f;
  lp.frequency_penalty = 0.9f;
  lp.repetition_penalty = 1.6f;
  lp.logit_bias = {{3, 1.2f}, {0, -0.8f}};
  return lp;
}

TEST(LogitsProcessor, MatchesTheFormulasAfterPushesAndPops) {
  const int V = 40;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  std::uniform_int_distribution<int> tok(0, V - 1);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 12; ++i) prompt.push_back(tok(gen));
  const LogitsParams lp = strong_penalties();
  LogitsProcessor proc(lp, prompt, V);
  std::vector<int32_t> out;
  std::vector<float> logits(V), got(V), want(V);
  for (int step = 0; step < 200; ++step) {
    for (float& x : logits) x = u(gen);
    got = logits;
    proc.apply(got.data());
    want = logits;
    reference_process(want.data(), V, lp, prompt, out);
    for (int v = 0; v < V; ++v) ASSERT_FLOAT_EQ(got[size_t(v)], want[size_t(v)]) << "step " << step << " token " << v;
    // Drafts tried and popped leave nothing behind; then one token is kept.
    const size_t depth = proc.depth();
    for (int k = 0; k < 3; ++k) proc.push(tok(gen));
    proc.pop_to(depth);
    got = logits;
    proc.apply(got.data());
    for (int v = 0; v < V; ++v) ASSERT_FLOAT_EQ(got[size_t(v)], want[size_t(v)]) << "after a pop, step " << step;
    out.push_back(tok(gen));
    proc.push(out.back());
  }
}

TEST(LogitsProcessor, BadValuesNameTheField) {
  auto param_of = [](LogitsParams lp) {
    try {
      lp.validate(100);
    } catch (const Error& e) {
      return e.param();
    }
    return std::string("(accepted)");
  };
  LogitsParams lp;
  EXPECT_EQ(param_of(lp), "(accepted)");
  lp.presence_penalty = 2.5f;
  EXPECT_EQ(param_of(lp), "presence_penalty");
  lp = {};
  lp.frequency_penalty = -2.01f;
  EXPECT_EQ(param_of(lp), "frequency_penalty");
  lp = {};
  lp.repetition_penalty = 0.f;
  EXPECT_EQ(param_of(lp), "repetition_penalty");
  lp = {};
  lp.logit_bias = {{100, 1.f}};
  EXPECT_EQ(param_of(lp), "logit_bias");
  lp.logit_bias = {{5, 101.f}};
  EXPECT_EQ(param_of(lp), "logit_bias");
}

// The exact joint distribution of the first n tokens under `sp` after the penalties, each
// prefix's logits processed with the formulas above.
std::vector<double> exact_penalised(const Model& target, const std::vector<int32_t>& prompt, const SamplingParams& sp,
                                    const LogitsParams& lp, int n) {
  const int V = target.config().vocab_size;
  return exact_joint(target, prompt, sp, n, DType::F32, [&](float* logits, const std::vector<int32_t>& output) {
    reference_process(logits, V, lp, prompt, output);
  });
}

struct DrafterCase {
  std::string kind;
  bool probabilistic, block;
};

// Each case's speculative output, 9,000 sampled runs of 3 tokens with `lp`, fitted to `exact`;
// with `every_case_rejects`, each case must also have accepted and rejected drafts (else only the
// neural drafters must have accepted some).
void fit_every_drafter(Harness& h, const std::vector<DrafterCase>& cases, const SamplingParams& sp,
                       const std::vector<double>& exact, const LogitsParams& lp, bool every_case_rejects) {
  for (const DrafterCase& c : cases) {
    DrafterSpec s;
    s.std = 0.6f;
    const std::string dir = c.kind == "ngram" ? "" : h.drafter(c.kind, s);
    SpecConfig sc = config_for(c.kind, dir, c.kind.starts_with("dflash") ? 4 : 3, c.probabilistic, c.block, 0);
    auto drafter = load_drafter(sc, *h.target, DType::F32);
    FullBlockPolicy full;
    SpecMetrics m;
    const ChiSquare cs = sampled_fit(h, *drafter, sc, full, sp, exact, 3, 9000, &m, lp);
    EXPECT_GT(cs.p_value, 0.001) << c.kind << (c.probabilistic ? " probabilistic" : " greedy-draft")
                                 << (c.block ? " block" : " token-level") << ": chi2 " << cs.statistic << " dof "
                                 << cs.dof;
    if (every_case_rejects || c.kind != "ngram") {
      EXPECT_GT(m.accepted, 0) << c.kind;
    }
    if (every_case_rejects) {
      EXPECT_LT(m.accepted, m.drafted) << c.kind;
    }
  }
}

SamplingParams sampled() {
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 5;
  return sp;
}

TEST(SpecPenalties, SampledOutputFollowsThePenalisedDistribution) {
  Harness h("penalties_sampled", 6, 21, 0.5f);
  const SamplingParams sp = sampled();
  const LogitsParams lp = strong_penalties();
  const auto exact = exact_penalised(*h.target, {1, 4, 2}, sp, lp, 3);
  const auto unpenalised = exact_joint(*h.target, {1, 4, 2}, sp, 3);
  {  // The penalties matter here: the penalised distribution is far from the plain one.
    double tv = 0;
    for (size_t i = 0; i < exact.size(); ++i) tv += std::abs(exact[i] - unpenalised[i]) / 2;
    ASSERT_GT(tv, 0.2) << "the penalties hardly change this target's distribution";
  }
  fit_every_drafter(h, {{"dspark", true, true},
                         {"dspark", false, false},
                         {"dspark", true, false},
                         {"dflash", true, true},
                         {"eagle3", true, true},
                         {"eagle3", false, false},
                         {"dspark-reduced-head", true, true},
                         {"ngram", false, true}},
                    sp, exact, lp, true);
}

// The bug this suite must catch: each row of a round processed with the output as it was before
// the round, as if the drafts before the row had not been emitted.
TEST(SpecPenalties, DraftsIgnoredByThePenaltiesFailTheSameTest) {
  Harness h("penalties_broken", 6, 21, 0.5f);
  const SamplingParams sp = sampled();
  const LogitsParams lp = strong_penalties();
  const auto exact = exact_penalised(*h.target, {1, 4, 2}, sp, lp, 3);
  DrafterSpec s;
  s.std = 0.6f;
  SpecConfig sc = config_for("dspark", h.drafter("dspark", s), 3, true, true, 0);
  auto drafter = load_drafter(sc, *h.target, DType::F32);
  FullBlockPolicy full;
  SpecMetrics m;
  set_processor_ignores_drafts(true);
  const ChiSquare cs = sampled_fit(h, *drafter, sc, full, sp, exact, 3, 9000, &m, lp);
  set_processor_ignores_drafts(false);
  EXPECT_LT(cs.p_value, 0.001) << "penalties that ignore the drafts went undetected: chi2 " << cs.statistic;
  std::cout << "penalties that ignore the drafts: chi2 " << cs.statistic << " on " << cs.dof << " dof, p "
            << cs.p_value << "\n";
  EXPECT_GT(m.accepted, 0);
}

// Structured output over a six-token vocabulary that spells JSON: {, }, "a", :, 1 and a space.
LogitsParams json_object_params() {
  LogitsParams lp;
  lp.grammar = JsonGrammar::any_object();
  lp.grammar_vocab = TokenVocab::build(std::vector<std::string>{"{", "}", "\"a\"", ":", "1", " "}, {});
  return lp;
}

// The exact joint distribution under the grammar's mask: each prefix's logits with the tokens a
// fresh matcher given that prefix refuses at -inf.
std::vector<double> exact_masked(const Model& target, const std::vector<int32_t>& prompt, const SamplingParams& sp,
                                 const LogitsParams& lp, int n) {
  std::vector<uint8_t> allowed(size_t(lp.grammar_vocab->size()));
  return exact_joint(target, prompt, sp, n, DType::F32, [&](float* logits, const std::vector<int32_t>& output) {
    JsonMatcher m(lp.grammar, lp.grammar_vocab);
    for (int32_t t : output) EXPECT_TRUE(m.push(t));
    m.allowed(allowed.data());
    for (int v = 0; v < target.config().vocab_size; ++v)
      if (v >= int(allowed.size()) || !allowed[size_t(v)]) logits[v] = -std::numeric_limits<float>::infinity();
  });
}

TEST(SpecGrammar, SampledOutputFollowsTheMaskedDistribution) {
  Harness h("grammar_sampled", 6, 21, 0.5f);
  const SamplingParams sp = sampled();
  const LogitsParams lp = json_object_params();
  const auto exact = exact_masked(*h.target, {1, 4, 2}, sp, lp, 3);
  ASSERT_EQ(exact.size(), 216u);
  // (The n-gram drafter's proposals rarely survive the mask, so only the others must accept.)
  fit_every_drafter(h, {{"dspark", true, true},
                         {"dspark", false, false},
                         {"dflash", true, true},
                         {"eagle3", true, true},
                         {"dspark-reduced-head", true, false},
                         {"ngram", false, true}},
                    sp, exact, lp, false);
  // The same wrong verification as above: rows masked by the state before the round.
  DrafterSpec s;
  s.std = 0.6f;
  SpecConfig sc = config_for("dspark", h.drafter("dspark", s), 3, true, true, 0);
  auto drafter = load_drafter(sc, *h.target, DType::F32);
  FullBlockPolicy full;
  set_processor_ignores_drafts(true);
  const ChiSquare cs = sampled_fit(h, *drafter, sc, full, sp, exact, 3, 9000, nullptr, lp);
  set_processor_ignores_drafts(false);
  EXPECT_LT(cs.p_value, 0.001) << "a mask that ignores the drafts went undetected: chi2 " << cs.statistic;
  std::cout << "a JSON mask that ignores the drafts: chi2 " << cs.statistic << " on " << cs.dof << " dof\n";
}

// Drafters sample from their own logits processed the same way: a token banned with a bias of
// -100 is never proposed, and every draft a drafter picks is pushed (the caller pops them).
TEST(SpecPenalties, DraftersProposeFromTheProcessedDistribution) {
  Harness h("penalties_drafts", 300, 5, 0.3f);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 23; ++i) prompt.push_back((i * 7 + 3) % 50);
  for (const std::string kind : {"dspark", "dflash", "eagle3", "dspark-reduced-head"}) {
    SpecConfig sc = config_for(kind, h.drafter(kind), kind.starts_with("eagle3") ? 3 : 4, true, true, 0);
    auto d = load_drafter(sc, *h.target, DType::F32);
    // The tokens this drafter proposes without a processor; each is then banned.
    SamplingParams sp;
    sp.temperature = 0.f;
    const Draft plain_draft = draft_once(h, *d, prompt, 7, 3, true, sp);
    ASSERT_EQ(plain_draft.tokens.size(), 3u) << kind;
    LogitsParams lp;
    for (int32_t t : plain_draft.tokens) lp.logit_bias.emplace_back(t, -100.f);
    for (float temperature : {0.f, 0.9f}) {
      LogitsProcessor proc(lp, prompt, h.cfg.vocab_size);
      sp.temperature = temperature;
      const Draft got = draft_once(h, *d, prompt, 7, 3, true, sp, &proc);
      ASSERT_EQ(got.tokens.size(), 3u) << kind;
      EXPECT_EQ(proc.depth(), 3u) << kind << ": the drafts were not pushed";
      for (int32_t t : got.tokens)
        EXPECT_EQ(std::count(plain_draft.tokens.begin(), plain_draft.tokens.end(), t), 0)
            << kind << " T=" << temperature << " proposed banned token " << t;
    }
  }
}

TEST(SpecPenalties, GreedyIsTokenIdenticalWithPenaltiesAloneAndInTheBatchingEngine) {
  Harness h("penalties_greedy", 300, 5, 0.3f);
  GenerateParams gp;
  gp.max_tokens = 40;
  gp.logits_params.presence_penalty = 0.4f;
  gp.logits_params.frequency_penalty = 0.3f;
  gp.logits_params.repetition_penalty = 1.3f;
  gp.logits_params.logit_bias = {{7, 2.f}, {11, -100.f}};
  std::vector<std::vector<int32_t>> prompts, want;
  for (int r = 0; r < 4; ++r) {
    std::vector<int32_t> p;
    for (int i = 0; i < 9 + 5 * r; ++i) p.push_back(int32_t((i * (7 + r) + 3) % 50));
    want.push_back(h.plain(p, gp).tokens);
    GenerateParams none = gp;
    none.logits_params = {};
    EXPECT_NE(want.back(), h.plain(p, none).tokens) << "the penalties change nothing for prompt " << r;
    EXPECT_EQ(std::count(want.back().begin(), want.back().end(), 11), 0) << "a banned token was emitted";
    prompts.push_back(std::move(p));
  }
  for (const std::string kind : {"dspark", "dflash", "eagle3", "dspark-reduced-head", "ngram"}) {
    const std::string dir = kind == "ngram" ? "" : h.drafter(kind);
    SpecConfig sc = config_for(kind, dir, kind.starts_with("eagle3") ? 3 : 4, false, false, 0);
    {
      auto d = load_drafter(sc, *h.target, DType::F32);
      FullBlockPolicy full;
      for (size_t r = 0; r < prompts.size(); ++r) {
        SpecMetrics m;
        EXPECT_EQ(h.spec(prompts[r], gp, *d, sc, full, &m).tokens, want[r]) << kind << " alone, prompt " << r;
        EXPECT_GT(m.rounds, 0) << kind;
      }
    }
    EngineOptions opt;
    opt.max_num_seqs = 4;
    Engine e(*h.target, *h.tok, opt, load_drafter(sc, *h.target, DType::F32), sc,
             std::make_unique<FullBlockPolicy>());
    std::vector<std::vector<int32_t>> got(prompts.size());
    for (size_t r = 0; r < prompts.size(); ++r)
      e.submit(EngineRequest("r" + std::to_string(r), prompts[r], gp), [&got, r](RequestOutput&& o) {
        got[r].insert(got[r].end(), o.token_ids.begin(), o.token_ids.end());
      });
    for (int step = 0; e.step(); ++step) ASSERT_LT(step, 10000) << kind << ": the engine never finished";
    for (size_t r = 0; r < prompts.size(); ++r) EXPECT_EQ(got[r], want[r]) << kind << " in the engine, prompt " << r;
  }
}

}  // namespace
}  // namespace dspark
