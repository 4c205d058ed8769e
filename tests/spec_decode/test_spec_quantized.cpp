// Speculative decoding on targets in the default precision: bf16, and quantized on load to Q8_0
// and Q4_K (held for the quantized kernels). Greedy speculative output equals plain greedy output,
// alone and in the batching engine, because every kernel sums each output in the same order
// whatever the number of rows in the step; sampled output follows the quantized target's own
// distribution (chi-square against its exact joint distribution).
#include <gtest/gtest.h>

#include "harness.h"
#include "kernels/gemm.h"
#include "runtime/engine.h"
#include "spec_decode/verify_length.h"

namespace dspark {
namespace {

using namespace dspark::testing;

// tiny-qwen3 widened so that every matrix's rows are whole Q4_K superblocks (256 weights).
ModelConfig wide_target(int vocab) {
  ModelConfig c = tiny_target(vocab);
  c.hidden_size = 256;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 512;
  return c;
}

struct TargetKind {
  const char* name;
  LoadOptions load;
};

std::vector<TargetKind> kinds() {
  return {{"bf16", LoadOptions{DType::BF16}},
          {"q8_0", LoadOptions{DType::BF16, GgmlType::Q8_0}},
          {"q4_k", LoadOptions{DType::BF16, GgmlType::Q4_K}}};
}

// The target's matrices are held as the kind says (so the test cannot pass on a bf16 fallback).
void expect_held_as(const Model& m, const TargetKind& k) {
  const LayerWeights& L = m.layer(0);
  for (const WeightMatrix* w : {&L.qkv, &L.o, &L.gate_up, &L.down, &m.lm_head()}) {
    if (!k.load.quantization) {
      EXPECT_FALSE(w->quantized()) << k.name;
      continue;
    }
    ASSERT_TRUE(w->quantized()) << k.name << ": a matrix was not held quantized";
    for (int j = 0; j < w->nparts; ++j) EXPECT_EQ(w->parts[j].type, *k.load.quantization) << k.name;
  }
}

TEST(SpecDefaultPrecision, GreedyIsTokenIdenticalOnBf16AndQuantizedTargets) {
  for (const TargetKind& k : kinds()) {
    const ModelConfig shape = wide_target(300);
    Harness h(std::string("greedy-") + k.name, 300, 5, 0.3f, k.load, &shape, DType::BF16);
    expect_held_as(*h.target, k);
    GenerateParams gp;
    gp.max_tokens = 160;  // long enough for the random target's greedy text to fall into loops
    std::vector<std::vector<int32_t>> prompts, want;
    for (int r = 0; r < 4; ++r) {
      std::vector<int32_t> p;
      for (int i = 0; i < 9 + 5 * r; ++i) p.push_back(int32_t((i * (7 + r) + 3) % 50));
      want.push_back(h.plain(p, gp).tokens);
      prompts.push_back(std::move(p));
    }
    for (const std::string kind : {"dspark", "dflash", "eagle3", "ngram"}) {
      const std::string dir = kind == "ngram" ? "" : h.drafter(kind);
      SpecConfig sc = config_for(kind, dir, kind == "eagle3" ? 3 : 4, false, false, 0);
      // Alone, rounds of a whole block: verification steps of 4 or 5 rows against decoding's 1.
      auto d = load_drafter(sc, *h.target, DType::BF16);
      FullBlockPolicy full;
      int64_t accepted = 0, drafted = 0;
      for (size_t r = 0; r < prompts.size(); ++r) {
        SpecMetrics m;
        EXPECT_EQ(h.spec(prompts[r], gp, *d, sc, full, &m).tokens, want[r]) << k.name << " " << kind << " prompt " << r;
        accepted += m.accepted;
        drafted += m.drafted;
      }
      // Every round verifies a whole block (its first row decides the next token as a decode step
      // would); the n-gram drafter, on these repetitive prompts, also gets drafts accepted, so
      // later rows decide tokens too. Random neural drafters rarely agree with a random target.
      EXPECT_GT(drafted, 0) << k.name << " " << kind;
      if (kind == "ngram") {
        EXPECT_GT(accepted, 0) << k.name << " " << kind << ": no draft was ever accepted";
      }
      std::printf("%s %s: %lld of %lld drafts accepted\n", k.name, kind.c_str(), (long long)accepted, (long long)drafted);
      // The four prompts in the batching engine: steps of 4 to 20 rows mixing prefill and verification.
      EngineOptions opt;
      opt.kv_dtype = DType::BF16;
      opt.max_num_seqs = 4;
      Engine e(*h.target, *h.tok, opt, load_drafter(sc, *h.target, DType::BF16), sc, std::make_unique<FullBlockPolicy>());
      std::vector<std::vector<int32_t>> got(prompts.size());
      for (size_t r = 0; r < prompts.size(); ++r)
        e.submit(EngineRequest("r" + std::to_string(r), prompts[r], gp), [&got, r](RequestOutput&& o) {
          got[r].insert(got[r].end(), o.token_ids.begin(), o.token_ids.end());
        });
      for (int step = 0; e.step(); ++step) ASSERT_LT(step, 10000) << kind << ": the engine never finished";
      for (size_t r = 0; r < prompts.size(); ++r) EXPECT_EQ(got[r], want[r]) << k.name << " " << kind << " engine, request " << r;
    }
    // A drafter quantized to a block format on load ("quantization": "q4_k" / "q8_0"): its
    // proposals change, what is generated does not.
    for (const char* q : {"q4_k", "q8_0"}) {
      SpecConfig sc = config_for("dspark", h.drafter("dspark"), 4, false, false, 0);
      sc.quantization = q;
      auto d = load_drafter(sc, *h.target, DType::BF16);
      FullBlockPolicy full;
      for (size_t r = 0; r < prompts.size(); ++r)
        EXPECT_EQ(h.spec(prompts[r], gp, *d, sc, full).tokens, want[r]) << k.name << " drafter " << q << " prompt " << r;
    }
  }
}

TEST(SpecDefaultPrecision, SampledOutputFollowsTheQuantizedTargetsDistribution) {
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 5;
  const int n_tokens = 3, runs = 6000;
  for (const TargetKind& k : kinds()) {
    if (!k.load.quantization) continue;
    const ModelConfig shape = wide_target(6);
    Harness h(std::string("sampled-") + k.name, 6, 21, 0.5f, k.load, &shape);
    expect_held_as(*h.target, k);
    const auto exact = exact_joint(*h.target, {1, 4, 2}, sp, n_tokens);
    struct Case {
      std::string kind;
      bool probabilistic, block;
    };
    for (const Case& c : {Case{"dspark", true, true}, Case{"dspark", false, false}, Case{"eagle3", true, false}}) {
      DrafterSpec s;
      s.std = 0.6f;
      const std::string dir = h.drafter(c.kind, s);
      SpecConfig sc = config_for(c.kind, dir, 3, c.probabilistic, c.block, 0);
      auto drafter = load_drafter(sc, *h.target, DType::F32);
      FullBlockPolicy full;
      SpecMetrics m;
      const ChiSquare cs = sampled_fit(h, *drafter, sc, full, sp, exact, n_tokens, runs, &m);
      EXPECT_GT(cs.p_value, 0.001) << k.name << " " << c.kind << (c.probabilistic ? " probabilistic" : " greedy-draft")
                                   << (c.block ? " block" : " standard") << ": chi2 " << cs.statistic << " dof " << cs.dof;
      EXPECT_GT(m.accepted, 0) << k.name << " " << c.kind;
      EXPECT_LT(m.accepted, m.drafted) << k.name << " " << c.kind;
    }
  }
}

}  // namespace
}  // namespace dspark
