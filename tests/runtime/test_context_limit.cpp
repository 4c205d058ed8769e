// The engine's one length rule (runtime/context_limit.h): prompt + output never exceed the
// maximum model length, plain and speculative alike; a prompt that leaves no room is refused
// before any work. (The speculative settings whose length must match the block:
// tests/spec_decode/test_block_lengths.cpp.)
#include <gtest/gtest.h>

#include <fstream>

#include "../error_of.h"

#include <functional>

#include "../data/test_util.h"
#include "core/error.h"
#include "../spec_decode/fixtures.h"
#include "model/forward.h"
#include "runtime/context_limit.h"
#include "runtime/generate.h"
#include "runtime/spec_generate.h"

namespace dspark {
namespace {

using namespace dspark::testing;

struct LengthRig {
  fs::path dir = temp_dir("ctxlimit");
  ModelConfig cfg = tiny_target(300);
  std::unique_ptr<Model> target = Model::build(cfg, *random_source(5, 0.3f), LoadOptions{DType::F32});
  std::unique_ptr<Tokenizer> tok;
  KvCache kv{cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, DType::F32, 1 << 12};
  Forward fwd{*target, kv};
  std::string drafter = (dir / "dspark").string();

  LengthRig() {
    std::ofstream(dir / "tokenizer.json") << tiny_tokenizer_json();
    tok = Tokenizer::from_file((dir / "tokenizer.json").string());
    DrafterSpec s;
    s.block = 4;
    write_dspark(drafter, cfg, s);
  }
  ~LengthRig() { fs::remove_all(dir); }

  GenerateResult run(const std::vector<int32_t>& prompt, const GenerateParams& gp, bool speculative) {
    if (!speculative) return generate(fwd, *tok, prompt, gp);
    SpecConfig sc = SpecConfig::parse(R"({"model": ")" + drafter + R"(", "num_speculative_tokens": 4})");
    auto d = load_drafter(sc, *target, DType::F32);
    FullBlockPolicy full;
    SpecMetrics m;
    return spec_generate(fwd, *tok, prompt, gp, *d, sc, full, m);
  }
};

std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 7 + 3) % 250);
  return p;
}

TEST(ContextLimit, GenerationEndsWithLengthAtTheMaximumModelLength) {
  LengthRig s;
  GenerateParams gp;
  gp.max_tokens = 100;
  gp.max_model_len = 23;
  const auto prompt = prompt_of(10);
  for (bool speculative : {false, true}) {
    const GenerateResult r = s.run(prompt, gp, speculative);
    EXPECT_EQ(r.tokens.size(), 13u) << (speculative ? "speculative" : "plain") << ": prompt + output must be 23";
    EXPECT_EQ(r.finish_reason, "length");
  }
  // The cut output is a prefix of the uncut one (f32 greedy: speculative equals plain).
  gp.max_model_len = 0;  // the config's 4096
  const GenerateResult whole = s.run(prompt, gp, false);
  ASSERT_EQ(whole.tokens.size(), 100u);
  gp.max_model_len = 23;
  const GenerateResult cut = s.run(prompt, gp, true);
  EXPECT_TRUE(std::equal(cut.tokens.begin(), cut.tokens.end(), whole.tokens.begin()));
  // max_tokens below the room left is what limits.
  gp.max_tokens = 5;
  EXPECT_EQ(s.run(prompt, gp, true).tokens.size(), 5u);
}

TEST(ContextLimit, PromptWithoutRoomIsRefusedBeforeAnyWork) {
  LengthRig s;
  GenerateParams gp;
  gp.max_model_len = 16;
  for (bool speculative : {false, true}) {
    for (int n : {16, 17, 5000}) {
      const std::string msg = error_of([&] { s.run(prompt_of(n), gp, speculative); });
      EXPECT_NE(msg.find("the prompt has " + std::to_string(n) + " tokens"), std::string::npos) << msg;
      EXPECT_NE(msg.find("maximum model length of 16"), std::string::npos) << msg;
    }
    EXPECT_EQ(s.run(prompt_of(15), gp, speculative).tokens.size(), 1u) << "15 + 1 = 16 fits";
  }
  // The config's max_position_embeddings (4096) is the default; a longer max_model_len is refused.
  gp.max_model_len = 0;
  EXPECT_NE(error_of([&] { s.run(prompt_of(4096), gp, false); }).find("maximum model length of 4096"), std::string::npos);
  gp.max_model_len = 5000;
  EXPECT_NE(error_of([&] { s.run(prompt_of(3), gp, false); }).find("exceeds the model's max_position_embeddings 4096"),
            std::string::npos);
  // The KV cache's room counts too (4096 positions here, all free).
  EXPECT_EQ(s.kv.room_for(s.kv.create_sequence()), 4096);
}

// max_tokens has one rule everywhere, the server's (GenerateParams::validate): at least 1, or
// kAsManyAsFit for as many as fit.
TEST(ContextLimit, MaxTokensHasTheServersRule) {
  LengthRig s;
  GenerateParams gp;
  gp.max_model_len = 23;
  gp.max_tokens = 0;
  for (bool speculative : {false, true}) {
    const std::string msg = error_of([&] { s.run(prompt_of(10), gp, speculative); });
    EXPECT_NE(msg.find("max_tokens must be at least 1, got 0"), std::string::npos) << msg;
  }
  gp.max_tokens = kAsManyAsFit;
  for (bool speculative : {false, true}) {
    const GenerateResult r = s.run(prompt_of(10), gp, speculative);
    EXPECT_EQ(r.tokens.size(), 13u) << "10 prompt tokens + as many as fit = 23";
    EXPECT_EQ(r.finish_reason, "length");
  }
  EXPECT_EQ(generation_budget(10, kAsManyAsFit, 23), 13);
}

TEST(ContextLimit, RuleFunctions) {
  ModelConfig c = tiny_target(300);
  EXPECT_EQ(resolve_max_model_len(c, 0), 4096);
  EXPECT_EQ(resolve_max_model_len(c, 100), 100);
  EXPECT_NE(error_of([&] { resolve_max_model_len(c, -1); }).find("--max-model-len"), std::string::npos);
  EXPECT_EQ(generation_budget(10, 100, 23), 13);
  EXPECT_EQ(generation_budget(10, 5, 23), 5);
  EXPECT_EQ(generation_budget(10, 0, 23), 0);
  EXPECT_NO_THROW(check_prompt_length(22, 23));
  EXPECT_THROW(check_prompt_length(23, 23), Error);
  EXPECT_THROW(check_prompt_length(0, 23), Error);
  EXPECT_NE(error_of([&] { check_prompt_length(10, 23, 10); }).find("KV cache holds 10 positions"), std::string::npos);
}

}  // namespace
}  // namespace dspark
