// Speculative decoding: configuration, drafter checkpoints, batched drafting, and the tests that
// show the chi-square fit can fail: a broken verifier, a residual cut to the draft vocabulary and
// an anticipating length policy do not pass it. The lossless tests on every kind of target are in
// test_lossless_targets.cpp.
#include <gtest/gtest.h>

#include "../error_of.h"

#include <functional>
#include <map>
#include <random>

#include "../data/test_util.h"
#include "core/error.h"
#include "fixtures.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "model/forward.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/spec_generate.h"
#include "sample/sampler.h"
#include "spec_decode/draft_vocab.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafters.h"
#include "spec_decode/verify.h"
#include "spec_decode/verify_length_prefix.h"
#include "harness.h"
#include "stats.h"

namespace dspark {
namespace {

using namespace dspark::testing;

// ---------------------------------------------------------------- configuration

TEST(SpecConfig, ReferenceDeploymentJsonWorksWithALocalPath) {
  auto dir = temp_dir("refdeploy");
  ModelConfig t = tiny_target(64);
  DrafterSpec s;
  s.block = 8;
  write_dspark((dir / "drafter").string(), t, s);
  const std::string j = R"({"model": ")" + (dir / "drafter").string() +
                        R"(", "num_speculative_tokens": 8, "method": "dspark", "draft_sample_method": "probabilistic", "rejection_sample_method": "block"})";
  SpecConfig c = SpecConfig::parse(j);
  EXPECT_EQ(c.method, SpecMethod::DSpark);
  EXPECT_EQ(c.num_speculative_tokens, 8);
  EXPECT_EQ(c.draft_sample, DraftSampleMethod::Probabilistic);
  EXPECT_EQ(c.rejection, RejectionMethod::Block);
  auto target = Model::build(t, *random_source(1), LoadOptions{DType::F32});
  auto d = load_drafter(c, *target, DType::F32);
  EXPECT_EQ(d->max_draft_tokens(), 8);
  fs::remove_all(dir);
}

TEST(SpecConfig, ErrorsNameTheField) {
  auto dir = temp_dir("cfgerr");
  ModelConfig t = tiny_target(64);
  DrafterSpec s;
  s.block = 4;
  write_dspark((dir / "d").string(), t, s);
  const std::string d = (dir / "d").string();
  auto target = Model::build(t, *random_source(1), LoadOptions{DType::F32});
  struct Case {
    std::string json, fragment;
  };
  const std::vector<Case> cases = {
      {R"({"method": "dspark", "model": ")" + d + R"(", "bogus": 1})", "unknown field 'bogus'"},
      {R"({"method": "dspark", "model": ")" + d + R"(", "num_speculative_tokens": "8"})", "'num_speculative_tokens' must be an integer"},
      {R"({"method": "medusa", "model": ")" + d + R"("})", "field 'method'"},
      {R"({"method": "dspark", "model": ")" + d + R"(", "draft_sample_method": "random"})", "'draft_sample_method'"},
      {R"({"method": "dspark", "model": ")" + d + R"(", "rejection_sample_method": "synthetic"})", "'rejection_sample_method'"},
      {R"({"method": "ngram", "draft_sample_method": "probabilistic", "num_speculative_tokens": 3})", "'draft_sample_method'"},
      {R"({"method": "ngram"})", "'num_speculative_tokens' is required"},
      {R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 4, "prompt_lookup_max": 2})", "'prompt_lookup_min'"},
      {R"({"method": "dspark"})", "field 'model'"},
      {R"({"method": "dspark", "model": "/nonexistent/drafter"})", "is not a directory"},
      {R"({"method": "eagle3", "model": ")" + d + R"(", "dspark_confidence_threshold": 0.5})", "'dspark_confidence_threshold'"},
      {R"([1, 2])", "expected a JSON object"},
      {R"({"model": ")" + d + R"(", "enable_adaptive_verification": 1})", "'enable_adaptive_verification' must be true or false"},
      {R"({"model": ")" + d + R"(", "enable_adaptive_verification": true, "dspark_sps_curve": [1, -2]})", "'dspark_sps_curve' entry 1"},
      {R"({"model": ")" + d + R"(", "enable_adaptive_verification": true, "dspark_sps_curve": []})", "'dspark_sps_curve' must be"},
      {R"({"model": ")" + d + R"(", "dspark_sps_curve": "auto"})", "needs 'enable_adaptive_verification': true"},
      {R"({"model": ")" + d + R"(", "enable_adaptive_verification": true, "dspark_confidence_threshold": 0.5})", "exclude each other"},
      {R"({"method": "eagle3", "model": ")" + d + R"(", "enable_adaptive_verification": true})", "'enable_adaptive_verification' applies only"},
      {R"({"model": ")" + d + R"(", "quantization": "fp8"})", "field 'quantization' is 'fp8'"},
      {R"({"model": ")" + d + R"(", "quantization": 8})", "field 'quantization' must be a string"},
      {R"({"method": "ngram", "num_speculative_tokens": 3, "quantization": "int8"})", "'quantization' does not apply to method ngram"},
      {R"({"method": "extract_hidden_states", "num_speculative_tokens": 1})", "needs draft_model_config"},
      {R"({"method": "extract_hidden_states", "num_speculative_tokens": 2, "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1]}}})", "must be 1 for method extract_hidden_states"},
      {R"({"method": "extract_hidden_states", "draft_model_config": {"hf_config": {}}})", "eagle_aux_hidden_state_layer_ids' must be"},
      {R"({"method": "extract_hidden_states", "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, -2]}}})", "holds -2"},
      {R"({"method": "extract_hidden_states", "model": "x", "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1]}}})", "unknown field 'model' for method extract_hidden_states"},
  };
  {
    const SpecConfig x = SpecConfig::parse(
        R"({"method": "extract_hidden_states", "num_speculative_tokens": 1, "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 6]}}})");
    EXPECT_TRUE(x.extract_hidden_states);
    EXPECT_EQ(x.aux_layer_ids, (std::vector<int>{2, 3, 6}));
  }
  for (const auto& c : cases) {
    const std::string msg = error_of([&] { SpecConfig::parse(c.json); });
    EXPECT_NE(msg.find(c.fragment), std::string::npos) << c.json << "\n  -> " << msg;
  }
  // Impossible combinations found when the drafter is loaded.
  const std::vector<Case> load_cases = {
      {R"({"method": "dspark", "model": ")" + d + R"(", "num_speculative_tokens": 5})", "'num_speculative_tokens' is 5"},
      {R"({"method": "dflash", "model": ")" + d + R"("})", "describes a dspark drafter"},
  };
  for (const auto& c : load_cases) {
    const std::string msg = error_of([&] {
      SpecConfig sc = SpecConfig::parse(c.json);
      load_drafter(sc, *target, DType::F32);
    });
    EXPECT_NE(msg.find(c.fragment), std::string::npos) << c.json << "\n  -> " << msg;
  }
  // int8 drafter weights are made from bf16 ones (here the run is f32), on the AVX512-BF16 backend.
  const std::string q8 = R"({"model": ")" + d + R"(", "quantization": "int8"})";
  EXPECT_EQ(SpecConfig::parse(q8).quantization, "int8");
  EXPECT_TRUE(SpecConfig::parse(R"({"model": ")" + d + R"(", "quantization": null})").quantization.empty());
  std::string qmsg = error_of([&] {
    SpecConfig sc = SpecConfig::parse(q8);
    load_drafter(sc, *target, DType::F32);
  });
  EXPECT_NE(qmsg.find("field 'quantization' int8 quantizes bf16 drafter weights; this run loads F32"), std::string::npos) << qmsg;
  if (gemm_backend_available(GemmBackend::Avx2)) {
    set_gemm_backend(GemmBackend::Avx2);
    qmsg = error_of([&] {
      SpecConfig sc = SpecConfig::parse(q8);
      load_drafter(sc, *target, DType::BF16);
    });
    set_gemm_backend(GemmBackend::Auto);
    EXPECT_NE(qmsg.find("needs the avx512bf16 matrix backend (a CPU with AVX512-BF16); this run uses avx2"), std::string::npos)
        << qmsg;
  }
  // A threshold needs a confidence head.
  DrafterSpec nc = s;
  nc.confidence = false;
  write_dspark((dir / "noconf").string(), t, nc);
  std::string msg = error_of([&] {
    SpecConfig sc = SpecConfig::parse(R"({"model": ")" + (dir / "noconf").string() + R"(", "dspark_confidence_threshold": 0.3})");
    load_drafter(sc, *target, DType::F32);
  });
  EXPECT_NE(msg.find("confidence head"), std::string::npos) << msg;
  // So does the adaptive verification length.
  msg = error_of([&] {
    SpecConfig sc = SpecConfig::parse(R"({"model": ")" + (dir / "noconf").string() + R"(", "enable_adaptive_verification": true})");
    load_drafter(sc, *target, DType::F32);
  });
  EXPECT_NE(msg.find("'enable_adaptive_verification' needs a DSpark drafter with a confidence head"), std::string::npos) << msg;
  // A valid adaptive config: an explicit curve is kept as given.
  SpecConfig ok = SpecConfig::parse(R"({"model": ")" + d + R"(", "enable_adaptive_verification": true, "dspark_sps_curve": [100, 60.5]})");
  EXPECT_TRUE(ok.adaptive_verification);
  EXPECT_EQ(ok.sps_curve, (std::vector<double>{100, 60.5}));
  EXPECT_TRUE(SpecConfig::parse(R"({"model": ")" + d + R"(", "enable_adaptive_verification": true, "dspark_sps_curve": "auto"})")
                  .sps_curve.empty());
  fs::remove_all(dir);
}

TEST(DrafterCheckpoint, BadTensorsAndFieldsAreNamed) {
  auto dir = temp_dir("ckpt");
  ModelConfig t = tiny_target(64);
  auto target = Model::build(t, *random_source(1), LoadOptions{DType::F32});
  DrafterSpec s;
  // An unexpected tensor.
  write_dspark((dir / "a").string(), t, s);
  {
    SafetensorsFile f((dir / "a" / "model.safetensors").string());
    SafetensorsWriter w;
    for (auto& [n, v] : f.tensors()) w.add(n, v.dtype, v.shape, v.data);
    float x = 1;
    w.add("markov_head.extra", DType::F32, {1}, &x);
    w.write((dir / "a" / "model.safetensors.new").string());
  }
  fs::rename(dir / "a" / "model.safetensors.new", dir / "a" / "model.safetensors");
  SpecConfig sc = SpecConfig::parse(R"({"model": ")" + (dir / "a").string() + R"("})");
  std::string msg = error_of([&] { load_drafter(sc, *target, DType::F32); });
  EXPECT_NE(msg.find("unexpected tensor 'markov_head.extra'"), std::string::npos) << msg;
  // A target layer the target does not have.
  DrafterSpec bad = s;
  bad.target_layers = {0, 7};
  write_dspark((dir / "b").string(), t, bad);
  sc = SpecConfig::parse(R"({"model": ")" + (dir / "b").string() + R"("})");
  msg = error_of([&] { load_drafter(sc, *target, DType::F32); });
  EXPECT_NE(msg.find("target layer id 7"), std::string::npos) << msg;
  // A wrong Markov shape.
  DrafterSpec r = s;
  write_dspark((dir / "c").string(), t, r);
  {
    auto cfg = json::parse(std::ifstream(dir / "c" / "config.json"));
    cfg["markov_rank"] = 16;
    std::ofstream(dir / "c" / "config.json") << cfg.dump();
  }
  sc = SpecConfig::parse(R"({"model": ")" + (dir / "c").string() + R"("})");
  msg = error_of([&] { load_drafter(sc, *target, DType::F32); });
  EXPECT_NE(msg.find("markov_head.markov_w1.weight"), std::string::npos) << msg;
  // An EAGLE-3 config of two layers over the tensors of one: the missing layer's tensor is named.
  write_eagle3((dir / "d").string(), t, s);
  {
    auto cfg = json::parse(std::ifstream(dir / "d" / "config.json"));
    cfg["transformer_layer_config"]["num_hidden_layers"] = 2;
    std::ofstream(dir / "d" / "config.json") << cfg.dump();
  }
  sc = SpecConfig::parse(R"({"model": ")" + (dir / "d").string() + R"("})");
  msg = error_of([&] { load_drafter(sc, *target, DType::F32); });
  EXPECT_NE(msg.find("layers.1."), std::string::npos) << msg;
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- reduced draft vocabularies

TEST(DraftVocab, ChoiceIsStopTokensThenCountsThenIds) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int V = 2 + int(rng() % 40);
    std::vector<int64_t> primary(static_cast<size_t>(V)), secondary(static_cast<size_t>(V));
    std::vector<uint8_t> allowed(static_cast<size_t>(V));
    for (int v = 0; v < V; ++v) {
      primary[size_t(v)] = rng() % 4 == 0 ? 0 : int64_t(rng() % 5);  // many ties
      secondary[size_t(v)] = int64_t(rng() % 3);
      allowed[size_t(v)] = rng() % 5 != 0;
    }
    allowed[0] = 1;
    std::vector<int32_t> always = {int32_t(rng() % uint32_t(V))};
    int available = 0;
    for (uint8_t a : allowed) available += a;
    const int size = 1 + int(rng() % uint32_t(available));
    // Brute force: rank every allowed id by (always, primary, secondary, -id) and take the best `size`.
    std::vector<std::tuple<int, int64_t, int64_t, int>> ranked;
    for (int v = 0; v < V; ++v)
      if (allowed[size_t(v)])
        ranked.emplace_back(v == always[0] ? 1 : 0, primary[size_t(v)], secondary[size_t(v)], -v);
    std::sort(ranked.rbegin(), ranked.rend());
    std::vector<int32_t> want;
    for (int i = 0; i < size; ++i) want.push_back(-std::get<3>(ranked[size_t(i)]));
    std::sort(want.begin(), want.end());
    EXPECT_EQ(choose_draft_vocab(primary, secondary, allowed, always, size), want) << "trial " << trial;
  }
  const std::vector<int64_t> counts = {5, 0, 7};
  EXPECT_NE(error_of([&] { choose_draft_vocab(counts, {}, {}, {}, 4); }).find("size 4 is outside [1, 3]"), std::string::npos);
}

// One proposal of k drafts after `anchor` (harness.h's draft_once): sampled at temperature 1
// when `dense`, else greedy.
Draft propose_once(Harness& h, Drafter& d, const std::vector<int32_t>& prompt, int32_t anchor, int k, bool dense) {
  SamplingParams sp;
  sp.temperature = dense ? 1.f : 0.f;
  return draft_once(h, d, prompt, anchor, k, dense, sp);
}

// "quantization": "int8" rounds the drafter's own matrices (never the target's) to int8 with a scale
// per row: its q moves a little from the bf16 drafter's, and every kind of drafter still loads and
// proposes. (Losslessness with int8 drafters: SpecLossless.SampledOutputFollowsTheTargetDistribution.)
TEST(Int8Drafter, ProposalsStayCloseToTheBf16Drafters) {
  if (gemm_backend() != GemmBackend::Avx512Bf16)  // refused with the backend named: SpecConfig.ErrorsNameTheField
    GTEST_SKIP() << "int8 drafter weights need the avx512bf16 backend; this run uses " << gemm_backend_name(gemm_backend());
  Harness h("int8", 300, 9, 0.3f);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 23; ++i) prompt.push_back((i * 13 + 3) % 97);
  for (const std::string kind : {"dspark", "dspark-reduced", "dflash", "eagle3", "eagle3-2l"}) {
    DrafterSpec s;
    s.std = 0.5f;
    const std::string dir = h.drafter(kind, s);
    SpecConfig plain_cfg = config_for(kind, dir, 3, true, false, 0), q8_cfg = plain_cfg;
    q8_cfg.quantization = "int8";
    auto bf = load_drafter(plain_cfg, *h.target, DType::BF16);
    auto q8 = load_drafter(q8_cfg, *h.target, DType::BF16);
    const int rows = kind == "dflash" ? 3 : 1;  // later DSpark / EAGLE-3 drafts follow the drawn tokens
    const Draft a = propose_once(h, *bf, prompt, 7, 3, true), b = propose_once(h, *q8, prompt, 7, 3, true);
    ASSERT_EQ(a.q.size(), b.q.size()) << kind;
    for (int r = 0; r < rows; ++r) {
      double worst = 0, mass = 0;
      for (int v = 0; v < h.cfg.vocab_size; ++v) {
        worst = std::max(worst, std::abs(double(a.q_row(r)[v]) - double(b.q_row(r)[v])));
        mass += b.q_row(r)[v];
      }
      EXPECT_NEAR(mass, 1.0, 1e-3) << kind;
      EXPECT_GT(worst, 0.0) << kind << ": the int8 drafter proposes exactly what the bf16 one does (nothing quantized?)";
      EXPECT_LT(worst, 0.05) << kind << " draft " << r << " worst " << worst;
    }
    if (kind == "dspark") {
      ASSERT_EQ(a.confidence.size(), b.confidence.size());
      EXPECT_NEAR(a.confidence[0], b.confidence[0], 0.02);
    }
  }
}

// propose_batch (the serving engine's one drafting pass per step) gives every sequence the draft
// propose() gives it alone: the same tokens and, sampled, the same q, for sequences of different
// lengths and draft counts in one batch. DSpark and DFlash run their blocks through the backbone
// together; EAGLE-3 runs each of its chained steps for all sequences at once. f32 drafters.
TEST(DrafterBatch, ProposeBatchGivesEachSequenceWhatProposeGivesItAlone) {
  Harness h("batch", 300, 13, 0.3f);
  for (const std::string kind : {"dspark", "dflash", "eagle3", "eagle3-2l", "eagle3-reduced"}) {
    DrafterSpec s;
    s.std = 0.5f;
    const std::string dir = h.drafter(kind, s);
    SpecConfig cfg = config_for(kind, dir, 4, true, false, 0);
    auto d = load_drafter(cfg, *h.target, DType::F32);
    const std::vector<int> lengths = {11, 23, 17};
    const std::vector<int> ks = {4, 2, 3};
    std::vector<int> tseqs, dseqs;
    for (size_t j = 0; j < lengths.size(); ++j) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < lengths[j]; ++i) prompt.push_back(int32_t((i * 7 + 3 * j + 1) % 97));
      tseqs.push_back(h.kv->create_sequence());
      dseqs.push_back(d->begin());
      Batch b;
      for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int(i), tseqs.back(), true);
      ForwardRequest req;
      req.tap_layers = d->target_layers();
      req.logits = false;
      const ForwardOutput& out = h.fwd->run(b, req);
      d->extend(dseqs.back(), prompt, 0, TargetFeatures{out.taps, out.n_out, out.n_taps * out.hidden});
    }
    for (const bool dense : {false, true}) {
      SamplingParams sp;
      sp.temperature = dense ? 1.f : 0.f;
      std::vector<Draft> alone(lengths.size()), batched(lengths.size());
      std::vector<Rng> rngs;
      for (size_t j = 0; j < lengths.size(); ++j) rngs.emplace_back(100 + j);
      for (size_t j = 0; j < lengths.size(); ++j)
        d->propose(dseqs[j], int32_t(5 + j), lengths[j], ks[j], DraftSampling{dense, sp, &rngs[j]}, alone[j]);
      rngs.clear();
      for (size_t j = 0; j < lengths.size(); ++j) rngs.emplace_back(100 + j);
      std::vector<DraftJob> jobs;
      for (size_t j = 0; j < lengths.size(); ++j)
        jobs.push_back({dseqs[j], int32_t(5 + j), lengths[j], ks[j], DraftSampling{dense, sp, &rngs[j]}, &batched[j]});
      d->propose_batch(jobs);
      for (size_t j = 0; j < lengths.size(); ++j) {
        const std::string what = kind + (dense ? " sampled" : " greedy") + ", sequence " + std::to_string(j);
        EXPECT_EQ(batched[j].tokens, alone[j].tokens) << what;
        ASSERT_EQ(batched[j].tokens.size(), size_t(ks[j])) << what;
        ASSERT_EQ(batched[j].q.size(), alone[j].q.size()) << what;
        double worst = 0;
        for (size_t v = 0; v < alone[j].q.size(); ++v)
          worst = std::max(worst, std::abs(double(batched[j].q[v]) - double(alone[j].q[v])));
        EXPECT_LT(worst, 1e-5) << what;
      }
    }
    for (size_t j = 0; j < lengths.size(); ++j) {
      d->end(dseqs[j]);
      h.kv->free_sequence(tseqs[j]);
    }
  }
}

// A drafter's context built in other ways than one extend() gives the same drafts as that
// extend(): the prompt then one committed token per plain step (accept() without a propose()
// before it), and a sequence that attaches the cached prefix of an ended one and extends only
// the rest. EAGLE-3 pairs row p with token p + 1: its cache hit drops the match's last block.
// f32 drafters, greedy tokens and sampled q.
TEST(DrafterContext, PlainStepsAndCachedPrefixesGiveTheDraftsOfOneExtend) {
  Harness h("context", 300, 17, 0.3f);
  const int n = 53, split = 30, max_len = (n - 1) / kKvBlock * kKvBlock;
  // x, and y: x with another token right after the longest prefix a hit may cover.
  std::vector<int32_t> x, y;
  for (int i = 0; i < n; ++i) x.push_back(int32_t((i * 11 + 7) % 97));
  y = x;
  y[size_t(max_len)] = (x[size_t(max_len)] + 1) % 97;
  for (const std::string kind : {"dspark", "dflash", "eagle3", "eagle3-2l"}) {
    DrafterSpec s;
    s.std = 0.5f;
    const std::string dir = h.drafter(kind, s);
    SpecConfig cfg = config_for(kind, dir, 4, true, false, 0);
    auto d = load_drafter(cfg, *h.target, DType::F32), cached = load_drafter(cfg, *h.target, DType::F32);
    cached->enable_prefix_caching();
    // The target's features of a whole sequence.
    auto features = [&](const std::vector<int32_t>& t) {
      const int tseq = h.kv->create_sequence();
      Batch b;
      for (int i = 0; i < n; ++i) b.add(t[size_t(i)], i, tseq, true);
      ForwardRequest req;
      req.tap_layers = d->target_layers();
      req.logits = false;
      const ForwardOutput& out = h.fwd->run(b, req);
      std::vector<float> f(out.taps, out.taps + int64_t(n) * out.n_taps * out.hidden);
      h.kv->free_sequence(tseq);
      return f;
    };
    const std::vector<float> fx = features(x), fy = features(y);
    const int width = int(fx.size() / size_t(n));
    auto rows = [&](const std::vector<float>& f, int from, int count) {
      return TargetFeatures{f.data() + int64_t(from) * width, count, width};
    };
    auto span = [](const std::vector<int32_t>& t, int from, int count) {
      return std::span<const int32_t>(t).subspan(size_t(from), size_t(count));
    };
    auto drafts = [&](Drafter& dr, int seq, bool dense) {
      SamplingParams sp;
      sp.temperature = dense ? 1.f : 0.f;
      Rng rng(9);
      Draft out;
      dr.propose(seq, 42, n, 4, DraftSampling{dense, sp, &rng}, out);
      return out;
    };
    // Greedy and sampled drafts of `seq` against those of one extend of `t` on `d`.
    auto check = [&](Drafter& dr, int seq, const std::vector<int32_t>& t, const std::vector<float>& f,
                     const std::string& what) {
      const int ref = d->begin();
      d->extend(ref, t, 0, rows(f, 0, n));
      for (const bool dense : {false, true}) {
        const Draft got = drafts(dr, seq, dense), want = drafts(*d, ref, dense);
        const std::string where = kind + ", " + what + (dense ? ", sampled" : ", greedy");
        EXPECT_EQ(got.tokens, want.tokens) << where;
        ASSERT_EQ(got.q.size(), want.q.size()) << where;
        double worst = 0;
        for (size_t v = 0; v < want.q.size(); ++v) worst = std::max(worst, std::abs(double(got.q[v]) - double(want.q[v])));
        EXPECT_LT(worst, 1e-5) << where;
      }
      d->end(ref);
    };
    // The prompt, then plain steps.
    const int plain = d->begin();
    d->extend(plain, span(x, 0, split), 0, rows(fx, 0, split));
    for (int p = split; p < n; ++p) d->accept(plain, span(x, p, 1), p, rows(fx, p, 1));
    check(*d, plain, x, fx, "plain steps");
    d->end(plain);
    // Cache hits on x's context: x itself, and y, which differs right after what may be reused.
    const int first = cached->begin();
    cached->extend(first, x, 0, rows(fx, 0, n));
    cached->end(first);
    for (const auto* t : {&x, &y}) {
      const std::vector<float>& f = t == &x ? fx : fy;
      const int hit = cached->begin();
      const int reused = cached->attach_prefix(hit, *t, max_len);
      EXPECT_EQ(reused, kind.starts_with("eagle3") ? max_len - kKvBlock : max_len) << kind;
      cached->extend(hit, span(*t, reused, n - reused), reused, rows(f, reused, n - reused));
      check(*cached, hit, *t, f, t == &x ? "cached prefix" : "cached prefix, another token after it");
      cached->end(hit);
    }
  }
}

// The serving engine with prefix caching and each kind of backbone or EAGLE-3 drafter, requests
// one after another. Greedy: f32 output equal to plain decoding; a repeated prompt reuses its
// cached blocks (EAGLE-3 all but the last of them), and a longer prompt that starts with it (a
// next turn) reuses them too. Sampled at T = 1 with one seed (these random drafters' greedy
// drafts are never the target's argmax): the repeat accepts exactly the drafts the first request
// accepted, so the drafter's reused context is the one it had.
TEST(DrafterContext, EngineWithPrefixCachingKeepsF32GreedyOutput) {
  Harness h("context_engine", 300, 19, 0.3f);
  GenerateParams greedy, sampled;
  greedy.max_tokens = 24;
  sampled.max_tokens = 64;
  sampled.sampling.temperature = 1.f;
  sampled.sampling.seed = 3;
  std::vector<int32_t> first, next;
  for (int i = 0; i < 61; ++i) first.push_back(int32_t((i * 13 + 5) % 89));
  next = first;
  for (int i = 0; i < 20; ++i) next.push_back(int32_t((i * 7 + 2) % 89));
  struct Run {
    std::vector<int32_t> prompt;
    GenerateParams gp;
  };
  const std::vector<Run> runs = {{first, greedy}, {first, greedy}, {next, greedy}, {first, sampled}, {first, sampled}};
  for (const std::string kind : {"dspark", "eagle3", "eagle3-2l"}) {
    DrafterSpec s;
    s.std = 0.5f;
    const std::string dir = h.drafter(kind, s);
    SpecConfig sc = config_for(kind, dir, 4, true, false, 0);
    EngineOptions opt;
    opt.enable_prefix_caching = true;
    Engine e(*h.target, *h.tok, opt, load_drafter(sc, *h.target, DType::F32), sc,
             std::make_unique<FullBlockPolicy>());
    std::vector<std::vector<int32_t>> got;
    std::vector<int64_t> accepted;
    std::vector<int> cached;
    for (size_t r = 0; r < runs.size(); ++r) {
      const int64_t before = e.metrics().spec_num_accepted_tokens;
      got.emplace_back();
      cached.push_back(-1);
      e.submit(EngineRequest("r" + std::to_string(r), runs[r].prompt, runs[r].gp), [&](RequestOutput&& o) {
        got.back().insert(got.back().end(), o.token_ids.begin(), o.token_ids.end());
        cached.back() = o.cached_tokens;
      });
      for (int step = 0; e.step(); ++step) ASSERT_LT(step, 10000) << kind << ": the engine never finished";
      accepted.push_back(e.metrics().spec_num_accepted_tokens - before);
    }
    for (size_t r = 0; r < 3; ++r) EXPECT_EQ(got[r], h.plain(runs[r].prompt, greedy).tokens) << kind << ", request " << r;
    const int whole = (int(first.size()) - 1) / kKvBlock * kKvBlock;
    const int reused = kind.starts_with("eagle3") ? whole - kKvBlock : whole;
    EXPECT_EQ(cached[0], 0) << kind;
    EXPECT_EQ(cached[1], reused) << kind;
    EXPECT_GE(cached[2], reused) << kind;
    EXPECT_EQ(cached[3], reused) << kind;
    EXPECT_EQ(got[4], got[3]) << kind << ": the sampled repeat";
    EXPECT_GT(accepted[3], 0) << kind << ": no draft accepted, so the repeat's count says nothing";
    EXPECT_EQ(accepted[4], accepted[3]) << kind << ": the repeat drafts differently";
  }
}

// config.json's "sliding_window": read, written by to_deepspec_json, off beside
// "use_sliding_window": false (as HF configs carry it), refused naming the field when it is not a
// positive integer. With a window of W, a block (an EAGLE-3 row) never reads the context before
// its last W positions: a context that differs only there gives the same drafts, bitwise, and a
// window longer than the context gives the drafts of no window. (One-layer EAGLE-3: a second
// layer's keys carry what the first saw, as in any stack of windowed layers.)
TEST(DrafterContext, SlidingWindowHidesTheContextBeforeIt) {
  Harness h("window", 300, 23, 0.3f);
  const int n = 47, W = 12;
  std::vector<int32_t> x, z;
  for (int i = 0; i < n; ++i) x.push_back(int32_t((i * 11 + 7) % 97));
  z = x;
  for (int i = 0; i < n - W - 1; ++i) z[size_t(i)] = int32_t((i * 5 + 3) % 97);
  for (const std::string kind : {"dspark", "dflash", "eagle3"}) {
    DrafterSpec s;
    s.std = 0.5f;
    const std::string dir = h.drafter(kind, s);
    const fs::path cfg_path = fs::path(dir) / "config.json";
    const nlohmann::json original = nlohmann::json::parse(slurp(cfg_path.string()));
    auto load_with = [&](const nlohmann::json& window, const nlohmann::json& use = nullptr) {
      nlohmann::json j = original;
      j["sliding_window"] = window;
      if (!use.is_null()) j["use_sliding_window"] = use;
      std::ofstream(cfg_path) << j.dump();
      SpecConfig cfg = config_for(kind, dir, 4, true, false, 0);
      return load_drafter(cfg, *h.target, DType::F32);
    };
    EXPECT_EQ(DrafterConfig::load(dir).sliding_window, 0) << kind;
    // Features: the target's of x, and for z the same rows with the early ones replaced.
    const int tseq = h.kv->create_sequence();
    Batch b;
    for (int i = 0; i < n; ++i) b.add(x[size_t(i)], i, tseq, true);
    auto none = load_with(nullptr);
    ForwardRequest req;
    req.tap_layers = none->target_layers();
    req.logits = false;
    const ForwardOutput& out = h.fwd->run(b, req);
    const int width = out.n_taps * out.hidden;
    const std::vector<float> fx(out.taps, out.taps + int64_t(n) * width);
    std::vector<float> fz = fx;
    for (int64_t i = 0; i < int64_t(n - W - 1) * width; ++i) fz[size_t(i)] = -0.5f * fz[size_t(i)] + 0.1f;
    h.kv->free_sequence(tseq);
    auto drafts = [&](Drafter& d, const std::vector<int32_t>& t, const std::vector<float>& f) {
      const int seq = d.begin();
      d.extend(seq, t, 0, TargetFeatures{f.data(), n, width});
      SamplingParams sp;
      sp.temperature = 1.f;
      Rng rng(4);
      Draft dr;
      d.propose(seq, 42, n, 4, DraftSampling{true, sp, &rng}, dr);
      d.end(seq);
      return dr;
    };
    const Draft plain_x = drafts(*none, x, fx), plain_z = drafts(*none, z, fz);
    EXPECT_NE(plain_x.q, plain_z.q) << kind << ": the early context changes nothing even without a window";
    auto windowed = load_with(W);
    EXPECT_EQ(DrafterConfig::load(dir).sliding_window, W) << kind;
    const Draft wx = drafts(*windowed, x, fx), wz = drafts(*windowed, z, fz);
    EXPECT_EQ(wz.tokens, wx.tokens) << kind;
    EXPECT_EQ(wz.q, wx.q) << kind << ": a windowed drafter read the context before its window";
    EXPECT_NE(wx.q, plain_x.q) << kind << ": the window changes nothing";
    auto wide = load_with(n + 10);
    EXPECT_EQ(drafts(*wide, x, fx).q, plain_x.q) << kind << ": a window longer than the context";
    auto off = load_with(W, false);
    EXPECT_EQ(DrafterConfig::load(dir).sliding_window, 0) << kind << ": use_sliding_window false";
    for (const nlohmann::json& bad : {nlohmann::json(0), nlohmann::json(-3), nlohmann::json("64")}) {
      nlohmann::json j = original;
      j["sliding_window"] = bad;
      std::ofstream(cfg_path) << j.dump();
      EXPECT_NE(error_of([&] { DrafterConfig::load(dir); }).find("field 'sliding_window' must be a positive integer"),
                std::string::npos)
          << kind << " " << bad.dump();
    }
    std::ofstream(cfg_path) << original.dump();
  }
  DrafterConfig dc = DrafterConfig::load(h.drafter("dspark"));
  dc.sliding_window = 128;
  EXPECT_EQ(dc.to_deepspec_json()["sliding_window"], 128);
  dc.sliding_window = 0;
  EXPECT_FALSE(dc.to_deepspec_json().contains("sliding_window"));
}

// A drafter with a draft vocabulary is the full one restricted to the kept ids: its greedy pick
// is the full drafter's best kept id, and its sampled q is the full q renormalised over them
// (zero elsewhere), whether its checkpoint holds only those rows of the head or keeps the whole
// head too. Checked on the first draft (every draft for DFlash, whose drafts do not depend on
// each other).
TEST(DraftVocab, ReducedDrafterIsTheFullOneRestricted) {
  Harness h("vocab", 300, 5, 0.3f);
  const int V = h.cfg.vocab_size;
  std::vector<int32_t> prompt;
  for (int i = 0; i < 19; ++i) prompt.push_back((i * 11 + 5) % 97);
  for (const std::string base : {"dspark", "dspark-gated", "dflash", "eagle3"}) {
    for (const std::string suffix : {"-reduced", "-reduced-head"}) {
      if (base == "eagle3" && suffix == "-reduced-head") continue;  // the same form
      const std::string kind = base + suffix;
      const bool whole_head = suffix == "-reduced" && base != "eagle3";  // the checkpoint keeps it
      DrafterSpec s;
      s.std = 0.5f;
      const std::string full_dir = h.drafter(base, s), reduced_dir = h.drafter(kind, s);
      const std::vector<uint8_t> kept = drafter_vocab_mask(reduced_dir, V);
      int n_kept = 0;
      for (uint8_t k : kept) n_kept += k;
      ASSERT_GT(n_kept, 0);
      ASSERT_LT(n_kept, V) << kind;
      EXPECT_EQ(drafter_head_mask(reduced_dir, V) == std::vector<uint8_t>(size_t(V), 1), whole_head) << kind;
      SpecConfig fs_ = config_for(base, full_dir, 3, true, false, 0), rs = config_for(kind, reduced_dir, 3, true, false, 0);
      auto full = load_drafter(fs_, *h.target, DType::F32);
      auto reduced = load_drafter(rs, *h.target, DType::F32);
      const int rows = base == "dflash" ? 3 : 1;
      const Draft fq = propose_once(h, *full, prompt, 7, 3, true), rq = propose_once(h, *reduced, prompt, 7, 3, true);
      ASSERT_EQ(rq.q.size(), size_t(3 * V)) << kind << ": q must cover the target vocabulary";
      for (int r = 0; r < rows; ++r) {
        double mass = 0;
        for (int v = 0; v < V; ++v)
          if (kept[size_t(v)]) mass += fq.q_row(r)[v];
        ASSERT_GT(mass, 0.05) << kind;
        double worst = 0;
        for (int v = 0; v < V; ++v) {
          const double want = kept[size_t(v)] ? fq.q_row(r)[v] / mass : 0.0;
          worst = std::max(worst, std::abs(double(rq.q_row(r)[v]) - want));
        }
        EXPECT_LT(worst, 1e-5) << kind << " draft " << r;
        EXPECT_TRUE(kept[size_t(rq.tokens[size_t(r)])]) << kind << ": drew id " << rq.tokens[size_t(r)];
      }
      const Draft fg = propose_once(h, *full, prompt, 7, 3, false), rg = propose_once(h, *reduced, prompt, 7, 3, false);
      for (int r = 0; r < rows; ++r) {
        // The full drafter's best kept id, by its q at T=1 (monotone in the logits).
        int best = -1;
        for (int v = 0; v < V; ++v)
          if (kept[size_t(v)] && (best < 0 || fq.q_row(r)[v] > fq.q_row(r)[best])) best = v;
        EXPECT_EQ(rg.tokens[size_t(r)], best) << kind << " draft " << r;
      }
      if (base == "dspark") {
        EXPECT_EQ(fg.confidence.size(), rg.confidence.size());
        EXPECT_NEAR(fg.confidence[0], rg.confidence[0], 1e-6) << "the confidence head does not depend on the vocabulary";
      }
    }
  }
}

TEST(DraftVocab, BadMappingsAreNamed) {
  auto dir = temp_dir("vocab_bad");
  ModelConfig t = tiny_target(64);
  auto target = Model::build(t, *random_source(1), LoadOptions{DType::F32});
  DrafterSpec s;
  write_dspark((dir / "full").string(), t, s);
  std::vector<int32_t> keep;
  for (int v = 0; v < 64; v += 2) keep.push_back(v);
  write_reduced_drafter((dir / "full").string(), *target, keep, (dir / "r").string(), /*reduced_head=*/true);
  write_reduced_drafter((dir / "full").string(), *target, keep, (dir / "w").string());  // the full head kept
  auto load = [&](const fs::path& d) {
    SpecConfig sc = SpecConfig::parse(R"({"model": ")" + d.string() + R"("})");
    return error_of([&] { load_drafter(sc, *target, DType::F32); });
  };
  EXPECT_EQ(load(dir / "r"), "");
  EXPECT_EQ(load(dir / "w"), "");
  // Rewrites r's tensors into `to`, with `edit` applied to d2t / t2d / the rest.
  auto rewrite = [&](const fs::path& to, const std::function<bool(const std::string&, SafetensorsWriter&, const TensorView&)>& edit) {
    fs::create_directories(to);
    fs::copy_file(dir / "r" / "config.json", to / "config.json", fs::copy_options::overwrite_existing);
    SafetensorsFile f((dir / "r" / "model.safetensors").string());
    SafetensorsWriter w;
    for (auto& [n, v] : f.tensors())
      if (!edit(n, w, v)) w.add(n, v.dtype, v.shape, v.data);
    w.write((to / "model.safetensors").string());
  };
  // Two draft ids naming one target id.
  rewrite(dir / "dup", [&](const std::string& n, SafetensorsWriter& w, const TensorView& v) {
    if (n != "d2t") return false;
    std::vector<int64_t> d(size_t(v.shape[0]));
    std::memcpy(d.data(), v.data, d.size() * 8);
    d[1] = d[0] - 1;  // draft id 1 -> target id 0, as draft id 0
    w.add(n, v.dtype, v.shape, d.data());
    return true;
  });
  EXPECT_NE(load(dir / "dup").find("two draft ids to target id 0"), std::string::npos) << load(dir / "dup");
  // t2d disagreeing with d2t.
  rewrite(dir / "t2d", [&](const std::string& n, SafetensorsWriter& w, const TensorView& v) {
    if (n != "t2d") return false;
    std::vector<uint8_t> m(v.data, v.data + v.nbytes);
    m[1] = 1;
    w.add(n, v.dtype, v.shape, m.data());
    return true;
  });
  EXPECT_NE(load(dir / "t2d").find("t2d marks target id 1"), std::string::npos) << load(dir / "t2d");
  // No d2t, a reduced draft_vocab_size.
  rewrite(dir / "nod2t", [&](const std::string& n, SafetensorsWriter&, const TensorView&) { return n == "d2t" || n == "t2d"; });
  EXPECT_NE(load(dir / "nod2t").find("no d2t tensor"), std::string::npos) << load(dir / "nod2t");
  // Tensor `name` replaced by zeros of `rows` rows.
  auto zero_rows = [](const std::string& name, int64_t rows) {
    return [name, rows](const std::string& n, SafetensorsWriter& w, const TensorView& v) {
      if (n != name) return false;
      std::vector<float> z(size_t(rows * v.shape[1]), 0.f);
      w.add_f32(n, {rows, v.shape[1]}, z.data(), DType::F32);
      return true;
    };
  };
  // A head of neither the draft vocabulary's rows nor the target's.
  rewrite(dir / "head", zero_rows("lm_head.weight", 10));
  EXPECT_NE(load(dir / "head").find("'lm_head.weight'"), std::string::npos) << load(dir / "head");
  // A Markov W2 of the full vocabulary under a reduced one.
  rewrite(dir / "w2", zero_rows("markov_head.markov_w2.weight", 64));
  EXPECT_NE(load(dir / "w2").find("markov_head.markov_w2.weight"), std::string::npos) << load(dir / "w2");
  // Reducing to an id the drafter cannot propose, or into its own directory.
  EXPECT_NE(error_of([&] { write_reduced_drafter((dir / "r").string(), *target, std::vector<int32_t>{1, 2}, (dir / "x").string()); })
                .find("token id 1 is not in the drafter's own draft vocabulary"),
            std::string::npos);
  EXPECT_NE(error_of([&] { write_reduced_drafter((dir / "r").string(), *target, keep, (dir / "r").string()); }).find("another directory"),
            std::string::npos);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- the n-gram drafter

TEST(Ngram, ProposesWhatFollowedTheLatestMatch) {
  auto d = make_ngram_drafter(1, 3, 8);
  const int seq = d->begin();
  const std::vector<int32_t> prompt = {9, 1, 2, 3, 4, 5, 1, 2, 3, 7, 8, 1, 2};
  d->extend(seq, prompt, 0, {});
  Draft out;
  Rng rng(1);
  DraftSampling ds{false, {}, &rng};
  // The text ends "1 2" + anchor 3: the latest earlier "1 2 3" (a 3-gram) was followed by 7 8 1 2.
  d->propose(seq, 3, int(prompt.size()), 4, ds, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{7, 8, 1, 2}));
  // Fewer tokens follow the match than asked for: propose what there is.
  d->propose(seq, 3, int(prompt.size()), 8, ds, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{7, 8, 1, 2, 3}));
  // No earlier occurrence of the anchor: nothing to propose.
  d->propose(seq, 42, int(prompt.size()), 4, ds, out);
  EXPECT_TRUE(out.tokens.empty());
  // Accepted tokens extend the history used for lookup.
  d->accept(seq, std::vector<int32_t>{42, 6}, int(prompt.size()), {});
  d->propose(seq, 42, int(prompt.size()) + 2, 2, ds, out);
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{6, 42}));
  d->end(seq);
}

// ---------------------------------------------------------------- sampled losslessness

TEST(SpecLossless, BrokenVerifierFailsTheSameTest) {
  Harness h("broken", 6, 21, 0.5f);
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 5;
  const auto exact = exact_joint(*h.target, {1, 4, 2}, sp, 3);
  DrafterSpec s;
  s.std = 0.6f;
  SpecConfig sc = config_for("dspark", h.drafter("dspark", s), 3, true, false, 0);
  auto drafter = load_drafter(sc, *h.target, DType::F32);
  FullBlockPolicy full;
  set_verifier_override(&verify_token_level_without_residual);
  const ChiSquare cs = sampled_fit(h, *drafter, sc, full, sp, exact, 3, 9000);
  set_verifier_override(nullptr);
  EXPECT_LT(cs.p_value, 0.001) << "a verifier that skips the residual went undetected: chi2 " << cs.statistic;
}

// A verifier whose rejections resample only among the tokens the drafter could propose (the
// residual cut to q's support): it never emits a token outside a draft vocabulary after a
// rejection, so the test above must catch it on a drafter that has one.
TEST(SpecLossless, ResidualCutToTheDraftVocabularyFails) {
  Harness h("broken_vocab", 6, 21, 0.5f);
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 5;
  const auto exact = exact_joint(*h.target, {1, 4, 2}, sp, 3);
  DrafterSpec s;
  s.std = 0.6f;
  const std::string dir = h.drafter("dspark-reduced", s);
  SpecConfig sc = config_for("dspark-reduced", dir, 3, true, false, 0);
  auto drafter = load_drafter(sc, *h.target, DType::F32);
  FullBlockPolicy full;
  SpecMetrics right_m, broken_m;
  const ChiSquare right = sampled_fit(h, *drafter, sc, full, sp, exact, 3, 9000, &right_m);
  EXPECT_GT(right.p_value, 0.001) << "the correct verifier on the same drafter: chi2 " << right.statistic;
  set_verifier_override(&verify_token_level_residual_within_draft_support);
  const ChiSquare cs = sampled_fit(h, *drafter, sc, full, sp, exact, 3, 9000, &broken_m);
  set_verifier_override(nullptr);
  EXPECT_LT(cs.p_value, 0.001) << "a residual cut to the draft vocabulary went undetected: chi2 " << cs.statistic;
  EXPECT_LT(right_m.accepted, right_m.drafted) << "no rejection, so the residual was never sampled";
}

// ---------------------------------------------------------------- Appendix A

// DSpark's Appendix-A counterexample: R = 1, gamma = 2, SPS(1..3) = 1.0, 0.5, 0.45, target
// (0.7, 0.3), draft (0.5, 0.5), c_1 = 1 and c_2 = 0.5 after token 0 but 0.1 after token 1.
// Choosing the length after seeing x_1 (global argmax) makes the first token (0.85, 0.15);
// Algorithm 1's early stop keeps (0.7, 0.3).
TEST(SpecLossless, AppendixACounterexample) {
  const std::vector<double> sps = {0.0, 1.0, 0.5, 0.45};
  const float p[3][2] = {{0.7f, 0.3f}, {0.7f, 0.3f}, {0.7f, 0.3f}};
  const float q[2][2] = {{0.5f, 0.5f}, {0.5f, 0.5f}};
  auto run = [&](VerifyLengthPolicy& policy, int n) {
    Rng draft_rng(1, 1), accept_rng(1, 2), residual_rng(1, 3);
    std::vector<int64_t> counts(2, 0);
    for (int i = 0; i < n; ++i) {
      Draft d;
      d.vocab = 2;
      d.tokens = {int32_t(draft_rng.uniform() < 0.5 ? 0 : 1), int32_t(draft_rng.uniform() < 0.5 ? 0 : 1)};
      d.confidence = {1.0f, d.tokens[0] == 0 ? 0.5f : 0.1f};
      int l = 0;
      const Draft* dp = &d;
      policy.choose(std::span<const Draft* const>(&dp, 1), std::span<int>(&l, 1));
      VerifyInput in{2, std::span<const int32_t>(d.tokens.data(), size_t(l)), &q[0][0], &p[0][0]};
      VerifyResult r = verify_token_level(in, VerifyRng{&accept_rng, &residual_rng});
      const int32_t first = r.accepted > 0 ? d.tokens[0] : r.next_token;
      ++counts[size_t(first)];
    }
    return counts;
  };
  const int n = 40000;
  PrefixLengthPolicy algorithm1(sps);
  AnticipatingLengthPolicy global(sps);
  auto good = run(algorithm1, n), bad = run(global, n);
  EXPECT_GT(chi_square(good, {0.7, 0.3}).p_value, 0.001) << good[0] << " / " << good[1];
  EXPECT_LT(chi_square(bad, {0.7, 0.3}).p_value, 0.001) << bad[0] << " / " << bad[1];
  EXPECT_GT(chi_square(bad, {0.85, 0.15}).p_value, 0.001) << "the anticipating rule should give the paper's (0.85, 0.15)";
}

// ---------------------------------------------------------------- verifiers in isolation

TEST(Verify, BlockIsNeverWorseThanTokenLevelOnAverage) {
  // Context-free toy: p and q fixed per position; accepted lengths averaged over many draws.
  const int V = 4, l = 4;
  std::vector<float> p = {0.4f, 0.3f, 0.2f, 0.1f}, q = {0.25f, 0.25f, 0.25f, 0.25f};
  std::vector<float> P, Q;
  for (int i = 0; i <= l; ++i) P.insert(P.end(), p.begin(), p.end());
  for (int i = 0; i < l; ++i) Q.insert(Q.end(), q.begin(), q.end());
  Rng draft(3, 1), a1(3, 2), r1(3, 3), a2(3, 4), r2(3, 5);
  double tok = 0, blk = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> x(l);
    for (auto& t : x) t = int32_t(draft.uniform() * V);
    VerifyInput in{V, x, Q.data(), P.data()};
    tok += verify_token_level(in, {&a1, &r1}).accepted;
    blk += verify_block(in, {&a2, &r2}).accepted;
  }
  EXPECT_GE(blk / n, tok / n - 0.02) << "block " << blk / n << " token " << tok / n;
}

TEST(Verify, GreedyFromLogitsMatchesGreedyOnOneHotDistributions) {
  // Temperature 0 skips building distributions: the decision from the raw logits rows must be the
  // one verify() makes from the sampler's one-hot rows, for every accepted length 0..l.
  const int V = 300, l = 5;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  Sampler sampler;
  SamplingParams greedy;  // temperature 0
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<float> logits(size_t(l + 1) * V), onehot(logits.size());
    for (auto& v : logits) v = trial % 3 == 0 ? float(int(nd(rng))) : nd(rng);  // ties in some trials
    std::vector<int32_t> best(l + 1), draft(l);
    for (int i = 0; i <= l; ++i) {
      sampler.dense(logits.data() + size_t(i) * V, V, greedy, onehot.data() + size_t(i) * V);
      best[size_t(i)] = argmax(logits.data() + size_t(i) * V, V);
      ASSERT_EQ(onehot[size_t(i) * V + size_t(best[size_t(i)])], 1.f);
    }
    const int agree = trial % (l + 1);  // drafts equal to the argmax up to here, then one that differs
    for (int i = 0; i < l; ++i) draft[size_t(i)] = i < agree ? best[size_t(i)] : (best[size_t(i)] + 1 + trial) % V;
    Rng a(1, 2), r(1, 3);
    const VerifyResult want = verify(RejectionMethod::Block, true, VerifyInput{V, draft, nullptr, onehot.data()}, {&a, &r});
    const VerifyResult got = verify_greedy_logits(draft, logits.data(), V, V);
    ASSERT_EQ(got.accepted, agree) << trial;
    ASSERT_EQ(got.accepted, want.accepted) << trial;
    ASSERT_EQ(got.next_token, want.next_token) << trial;
    ASSERT_EQ(got.next_token, best[size_t(agree)]) << trial;
  }
}

}  // namespace
}  // namespace dspark
