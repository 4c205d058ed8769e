// Hidden-state export from the serving engine (the hidden-states connector's source): for every
// request that asks, the exported rows are the target's own layer outputs at each position, as one
// forward pass of the whole sequence alone computes them, under concurrency, chunked prefill,
// preemption and speculative decoding (the drafter's taps shared), and exporting never changes a
// request's tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "model/forward.h"
#include "runtime/engine.h"
#include "runtime/spec_generate.h"
#include "tokenizer/tokenizer.h"

namespace dspark {
namespace {

namespace fs = std::filesystem;
const std::string kModels = DSPARK_MODELS_DIR;

struct Done {
  std::vector<int32_t> tokens;
  bool finished = false;
  std::string reason;
};

class ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kModels + "/demo/config.json") ||
        !fs::exists(kModels + "/demo-dspark/config.json"))
      GTEST_SKIP() << "models/demo and models/demo-dspark are not in this checkout";
    target = Model::load(kModels + "/demo", LoadOptions{DType::F32});
    tok = Tokenizer::from_dir(kModels + "/demo");
    const ChatFormat fmt = detect_chat_format(*tok);
    for (const char* t : {"Tom has 15 apples and gives 6 to Ana. How many are left?",
                          "Write a short note about the weather.", "What is 7 times 8?",
                          "List three colours and say why you like each of them."})
      prompts.push_back(tok->encode(apply_chat_template(fmt, {{"user", t}}, true)));
  }

  // The layers' outputs for every position of `ids`, from one forward pass of them alone.
  std::vector<float> reference(const std::vector<int32_t>& ids, const std::vector<int>& layers) {
    const ModelConfig& c = target->config();
    KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 4096);
    Forward fwd(*target, kv);
    const int seq = kv.create_sequence();
    Batch b;
    for (size_t p = 0; p < ids.size(); ++p) b.add(ids[p], int32_t(p), seq, true);
    ForwardRequest req;
    req.tap_layers = layers;
    req.logits = false;
    const ForwardOutput& out = fwd.run(b, req);
    return std::vector<float>(out.taps,
                              out.taps + size_t(out.n_out) * layers.size() * c.hidden_size);
  }

  std::unique_ptr<Engine> engine(EngineOptions opt, bool dspark) {
    opt.kv_dtype = DType::F32;
    if (!dspark) return std::make_unique<Engine>(*target, *tok, opt);
    const nlohmann::json j = {{"model", kModels + "/demo-dspark"},
                              {"method", "dspark"},
                              {"num_speculative_tokens", 8},
                              {"enable_adaptive_verification", true}};
    SpecConfig sc = SpecConfig::parse(j.dump());
    auto d = load_drafter(sc, *target, DType::F32);
    auto policy = make_verify_policy(sc, *target, DType::F32, opt.max_num_batched_tokens);
    return std::make_unique<Engine>(*target, *tok, opt, std::move(d), sc, std::move(policy));
  }

  std::unique_ptr<Model> target;
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::vector<int32_t>> prompts;
};

TEST_F(ExportTest, ExportedRowsAreTheTargetsLayerOutputsAndTokensDoNotChange) {
  // -1 (the embeddings) and 5 (the last layer, before the final norm) are not among the demo
  // drafter's taps (1, 3, 4); 3 is.
  const std::vector<int> layers = {-1, 3, 5};
  struct Case {
    const char* name;
    bool dspark;
    int max_seqs, batched_tokens;
    int64_t kv_tokens;
  };
  for (const Case& c : {Case{"plain, all at once", false, 4, 2048, 0},
                        Case{"dspark adaptive, all at once", true, 4, 2048, 0},
                        Case{"dspark, 16-token steps", true, 4, 16, 0},
                        Case{"dspark, a KV pool for two (preemption)", true, 4, 2048, 160}}) {
    SCOPED_TRACE(c.name);
    std::vector<HiddenExport> exports;
    EngineOptions opt;
    opt.max_num_seqs = c.max_seqs;
    opt.max_num_batched_tokens = c.batched_tokens;
    opt.kv_tokens = c.kv_tokens;
    opt.export_layers = layers;
    opt.export_bf16 = false;
    opt.on_export = [&](HiddenExport&& e) { exports.push_back(std::move(e)); };
    auto e = engine(opt, c.dspark);
    auto plain = engine(EngineOptions{}, c.dspark);  // the same, exporting nothing
    std::vector<Done> got(prompts.size()), want(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r{"r" + std::to_string(i), prompts[i], {}};
      r.params.max_tokens = 24;
      r.params.stop_token_ids = target->config().eos_token_ids;
      plain->submit(r, [&want, i](RequestOutput&& o) {
        want[i].tokens.insert(want[i].tokens.end(), o.token_ids.begin(), o.token_ids.end());
      });
      if (i != 2) {  // request 2 exports nothing; request 1 only its prompt
        r.export_hidden = true;
        r.export_output_tokens = i != 1;
        r.export_handle = "h" + std::to_string(i);
      }
      e->submit(r, [&got, i](RequestOutput&& o) {
        got[i].tokens.insert(got[i].tokens.end(), o.token_ids.begin(), o.token_ids.end());
        got[i].finished = o.finished;
        got[i].reason = o.finish_reason;
      });
    }
    while (plain->step()) {
    }
    while (e->step()) {
    }
    if (c.kv_tokens > 0) {
      EXPECT_GT(e->metrics().num_preemptions, 0) << "the small pool never preempted";
    }
    ASSERT_EQ(exports.size(), 3u);
    const int H = target->config().hidden_size;
    for (const HiddenExport& x : exports) {
      const size_t i = size_t(x.handle[1] - '0');
      SCOPED_TRACE(x.handle);
      EXPECT_TRUE(got[i].finished);
      EXPECT_EQ(got[i].tokens, want[i].tokens) << "exporting changed the output";
      EXPECT_EQ(x.error, "");
      EXPECT_EQ(x.request_id, "r" + std::to_string(i));
      EXPECT_EQ(x.prompt_tokens, int(prompts[i].size()));
      EXPECT_EQ(x.output_tokens, int(got[i].tokens.size()));
      std::vector<int32_t> ids = prompts[i];
      if (i != 1) ids.insert(ids.end(), got[i].tokens.begin(), got[i].tokens.end() - 1);
      ASSERT_EQ(x.token_ids, ids);
      EXPECT_EQ(x.layers, layers);
      EXPECT_FALSE(x.bf16);
      ASSERT_EQ(x.bytes.size(), ids.size() * layers.size() * size_t(H) * 4);
      std::vector<float> v(x.bytes.size() / 4);
      std::memcpy(v.data(), x.bytes.data(), x.bytes.size());
      const std::vector<float> ref = reference(ids, layers);
      ASSERT_EQ(v.size(), ref.size());
      // Batched and single-sequence matrix products round differently; a wrong row (another
      // position, another layer, a rejected draft's) is off by far more.
      double worst = 0;
      size_t at = 0;
      for (size_t k = 0; k < v.size(); ++k) {
        const double d =
            std::fabs(double(v[k]) - double(ref[k])) / (1.0 + std::fabs(double(ref[k])));
        if (d > worst) worst = d, at = k;
      }
      EXPECT_LT(worst, 2e-3) << "at position " << at / (layers.size() * size_t(H))
                             << ", layer slot " << (at / size_t(H)) % layers.size();
    }
  }
}

TEST_F(ExportTest, Bf16ExportIsTheF32RowsRounded) {
  std::vector<HiddenExport> exports;
  EngineOptions opt;
  opt.export_layers = {5};
  opt.on_export = [&](HiddenExport&& e) { exports.push_back(std::move(e)); };
  auto e = engine(opt, true);
  EngineRequest r{"r", prompts[0], {}};
  r.params.max_tokens = 8;
  r.export_hidden = r.export_output_tokens = true;
  r.export_handle = "h";
  e->submit(r, [](RequestOutput&&) {});
  while (e->step()) {
  }
  ASSERT_EQ(exports.size(), 1u);
  const HiddenExport& x = exports[0];
  EXPECT_TRUE(x.bf16);
  const int H = target->config().hidden_size;
  ASSERT_EQ(x.bytes.size(), x.token_ids.size() * size_t(H) * 2);
  const std::vector<float> ref = reference(x.token_ids, {5});
  for (size_t k = 0; k < ref.size(); ++k) {
    uint16_t b;
    std::memcpy(&b, x.bytes.data() + 2 * k, 2);
    const float f = bf16_to_f32(b);
    ASSERT_LE(std::fabs(f - ref[k]), 1e-2f * (1 + std::fabs(ref[k]))) << "element " << k;
  }
}

TEST_F(ExportTest, RefusesExportWithoutExportLayersAndSkipsAbortedRequests) {
  auto plain = engine(EngineOptions{}, false);
  EngineRequest r{"r", prompts[0], {}};
  r.params.max_tokens = 4;
  r.export_hidden = true;
  EXPECT_THROW(plain->submit(r, [](RequestOutput&&) {}), Error);

  int exported = 0;
  EngineOptions opt;
  opt.export_layers = {0};
  opt.on_export = [&](HiddenExport&&) { ++exported; };
  auto e = engine(opt, false);
  r.params.max_tokens = 64;
  const uint64_t h = e->submit(r, [](RequestOutput&&) {});
  e->step();
  e->abort(h);
  while (e->step()) {
  }
  EXPECT_EQ(exported, 0) << "an aborted request's handle reached nobody; nothing to export";
}

}  // namespace
}  // namespace dspark

namespace dspark {
namespace {

// Hot drafter reload: requests running at the swap finish on their drafter, new ones get the new
// one, outputs stay the target's (f32 greedy equals plain decoding), the old version is freed
// once its last request ends, and a drafter of another kind is refused.
TEST_F(ExportTest, SwappedDrafterServesNewRequestsAndRunningOnesKeepTheirs) {
  auto plain = engine(EngineOptions{}, false);
  auto e = engine(EngineOptions{}, true);
  std::vector<Done> want(prompts.size()), got(prompts.size());
  auto request = [&](size_t i) {
    EngineRequest r{"r" + std::to_string(i), prompts[i], {}};
    r.params.max_tokens = 32;
    r.params.stop_token_ids = target->config().eos_token_ids;
    return r;
  };
  for (size_t i = 0; i < prompts.size(); ++i)
    plain->submit(request(i), [&want, i](RequestOutput&& o) {
      want[i].tokens.insert(want[i].tokens.end(), o.token_ids.begin(), o.token_ids.end());
    });
  while (plain->step()) {
  }
  auto collect = [&got](size_t i) {
    return [&got, i](RequestOutput&& o) {
      got[i].tokens.insert(got[i].tokens.end(), o.token_ids.begin(), o.token_ids.end());
      got[i].finished = o.finished;
    };
  };
  e->submit(request(0), collect(0));
  e->submit(request(1), collect(1));
  for (int i = 0; i < 3; ++i) e->step();
  EXPECT_EQ(e->metrics().drafter_version, 1);
  SpecConfig sc = SpecConfig::parse(
      nlohmann::json{{"model", kModels + "/demo-dspark"}, {"method", "dspark"}}.dump());
  EXPECT_EQ(e->swap_drafter(load_drafter(sc, *target, DType::F32)), 2);
  e->step();
  EXPECT_EQ(e->metrics().drafter_version, 2);
  e->submit(request(2), collect(2));
  e->submit(request(3), collect(3));
  while (e->step()) {
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_TRUE(got[i].finished) << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i << " differs from plain decoding";
  }
  const EngineMetrics m = e->metrics();
  ASSERT_EQ(m.spec_by_drafter.count(1), 1u);
  ASSERT_EQ(m.spec_by_drafter.count(2), 1u) << "the new requests never drafted with version 2";
  EXPECT_GT(m.spec_by_drafter.at(1).drafts, 0);
  EXPECT_EQ(m.spec_by_drafter.at(1).drafts + m.spec_by_drafter.at(2).drafts, m.spec_num_drafts);

  SpecConfig ng = SpecConfig::parse(R"({"method": "ngram", "num_speculative_tokens": 4})");
  try {
    e->swap_drafter(load_drafter(ng, *target, DType::F32));
    ADD_FAILURE() << "an n-gram drafter replaced a DSpark one";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("ngram"), std::string::npos) << err.what();
  }
  auto none = engine(EngineOptions{}, false);
  EXPECT_THROW(none->swap_drafter(load_drafter(sc, *target, DType::F32)), Error);
}

}  // namespace
}  // namespace dspark
