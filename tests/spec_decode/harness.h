// The end-to-end harness of the speculative tests: a tiny random target with its tokenizer, KV
// cache and forward, drafters of every kind written beside it, plain and speculative generation,
// and the chi-square fit of sampled output against the target's exact distribution.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "../data/test_util.h"
#include "fixtures.h"
#include "model/forward.h"
#include "runtime/generate.h"
#include "runtime/spec_generate.h"
#include "spec_decode/draft_vocab.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafters.h"
#include "stats.h"
#include "tokenizer/tokenizer.h"

namespace dspark::testing {

struct Harness {
  fs::path dir;
  ModelConfig cfg;
  std::unique_ptr<Model> target;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Forward> fwd;

  // A tiny random target held as `load` says (f32 by default; bf16, or quantized on load, for the
  // default-precision tests), with an f32 KV cache unless `kv_dtype` says otherwise.
  Harness(const std::string& name, int vocab, uint64_t seed, float std, LoadOptions load = LoadOptions{DType::F32},
          const ModelConfig* shape = nullptr, DType kv_dtype = DType::F32)
      : dir(temp_dir(name)), cfg(shape ? *shape : tiny_target(vocab)) {
    cfg.vocab_size = vocab;
    target = Model::build(cfg, *random_source(seed, std), load);
    std::ofstream(dir / "tokenizer.json") << dspark::testing::tiny_tokenizer_json();
    tok = Tokenizer::from_file((dir / "tokenizer.json").string());
    kv = std::make_unique<KvCache>(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, kv_dtype, 1 << 16);
    fwd = std::make_unique<Forward>(*target, *kv);
  }
  ~Harness() { fs::remove_all(dir); }

  std::string drafter(const std::string& kind, DrafterSpec s = {}) {
    const std::string d = (dir / kind).string();
    if (kind == "dspark") write_dspark(d, cfg, s);
    else if (kind == "dspark-speculators") write_dspark(d, cfg, s, true);
    else if (kind == "dspark-gated") { s.head = "gated"; write_dspark(d, cfg, s); }
    else if (kind == "dspark-rnn") { s.head = "rnn"; write_dspark(d, cfg, s); }
    else if (kind == "dflash") { s.block = 5; write_dflash(d, cfg, s); }
    else if (kind == "eagle3") write_eagle3(d, cfg, s);
    else if (kind == "eagle3-2l") { s.layers = 2; write_eagle3(d, cfg, s); }
    else if (kind.ends_with("-reduced") || kind.ends_with("-reduced-head")) {
      // The drafter `base` with a draft vocabulary: the ids its head scores whose index is not
      // 1 mod 3. "-reduced" keeps a DSpark / DFlash head whole (greedy rounds use the draft
      // vocabulary); "-reduced-head" (and EAGLE-3 always) keeps only the kept rows.
      const bool head = kind.ends_with("-reduced-head");
      const std::string full = drafter(kind.substr(0, kind.size() - (head ? 13 : 8)), s);
      const std::vector<uint8_t> can = drafter_head_mask(full, cfg.vocab_size);
      std::vector<int32_t> keep;
      for (int v = 0, n = 0; v < cfg.vocab_size; ++v)
        if (can[size_t(v)] && n++ % 3 != 1) keep.push_back(v);
      write_reduced_drafter(full, *target, keep, d, head);
    }
    return d;
  }

  GenerateResult plain(const std::vector<int32_t>& prompt, const GenerateParams& gp) {
    return generate(*fwd, *tok, prompt, gp);
  }

  GenerateResult spec(const std::vector<int32_t>& prompt, const GenerateParams& gp, Drafter& d, const SpecConfig& sc,
                      VerifyLengthPolicy& policy, SpecMetrics* metrics = nullptr) {
    SpecMetrics m;
    return spec_generate(*fwd, *tok, prompt, gp, d, sc, policy, metrics ? *metrics : m);
  }
};

inline SpecConfig config_for(const std::string& kind, const std::string& dir, int k, bool probabilistic, bool block, float thr) {
  json j;
  if (kind == "ngram") {
    j = {{"method", "ngram"}, {"num_speculative_tokens", k}, {"prompt_lookup_min", 1}, {"prompt_lookup_max", 3}};
  } else {
    j = {{"model", dir}, {"num_speculative_tokens", k}};
    if (probabilistic) j["draft_sample_method"] = "probabilistic";
  }
  if (block) j["rejection_sample_method"] = "block";
  if (thr > 0) j["dspark_confidence_threshold"] = thr;
  return SpecConfig::parse(j.dump());
}


// Target features of `prompt` fed to the drafter, then one proposal of k drafts after `anchor`
// (sampled from q when `probabilistic` and sp is not greedy), with `proc` when given.
inline Draft draft_once(Harness& h, Drafter& d, const std::vector<int32_t>& prompt, int32_t anchor, int k,
                        bool probabilistic, const SamplingParams& sp, LogitsProcessor* proc = nullptr) {
  const int seq = h.kv->create_sequence(), dseq = d.begin();
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], int(i), seq, true);
  ForwardRequest req;
  req.tap_layers = d.target_layers();
  req.logits = false;
  const ForwardOutput& out = h.fwd->run(b, req);
  d.extend(dseq, prompt, 0, TargetFeatures{out.taps, out.n_out, out.n_taps * out.hidden});
  Rng rng(5);
  DraftSampling ds{probabilistic, sp, &rng, proc};
  Draft draft;
  d.propose(dseq, anchor, int(prompt.size()), k, ds, draft);
  d.end(dseq);
  h.kv->free_sequence(seq);
  return draft;
}

inline ChiSquare sampled_fit(Harness& h, Drafter& d, const SpecConfig& sc, VerifyLengthPolicy& policy, const SamplingParams& sp,
                      const std::vector<double>& exact, int n_tokens, int runs, SpecMetrics* metrics = nullptr,
                      const LogitsParams& lp = LogitsParams{}) {
  const std::vector<int32_t> prompt = {1, 4, 2};
  const int V = h.cfg.vocab_size;
  std::vector<int64_t> counts(exact.size(), 0);
  GenerateParams gp;
  gp.max_tokens = n_tokens;
  gp.sampling = sp;
  gp.logits_params = lp;
  for (int r = 0; r < runs; ++r) {
    gp.sampling.seed = uint64_t(r) * 7919 + 17;
    auto res = h.spec(prompt, gp, d, sc, policy, metrics);
    if (res.tokens.size() < size_t(n_tokens)) {
      ADD_FAILURE() << "run " << r << " produced " << res.tokens.size() << " tokens, want " << n_tokens;
      break;
    }
    size_t cell = 0;
    for (int i = 0; i < n_tokens; ++i) {
      const int32_t t = res.tokens[size_t(i)];
      if (t < 0 || t >= V) {
        ADD_FAILURE() << "run " << r << " produced token " << t << " outside the vocabulary of " << V;
        return chi_square(counts, exact);
      }
      cell = cell * size_t(V) + size_t(t);
    }
    ++counts[cell];
  }
  return chi_square(counts, exact);
}

}  // namespace dspark::testing
