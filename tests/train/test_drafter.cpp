// Drafter training: losses against hand-computed values, anchors and masks against brute-force
// constructions, a tiny end-to-end run (regenerate -> hidden states -> training -> the engine
// loads the drafter and measures acceptance), and two data-parallel processes over gloo giving
// the losses of one process at the same global batch, and the engine's DSpark, DFlash and EAGLE-3
// proposals against the trainer's own forward passes of the same saved drafters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <span>

#include "drafter_fixtures.h"
#include "core/cpu.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "datagen/hidden.h"
#include "datagen/regenerate.h"
#include "model/forward.h"
#include "runtime/spec_generate.h"
#include "core/mmap_file.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafter_config.h"
#include "train/drafter_losses.h"
#include "train/drafter_model.h"
#include "train/drafter_trainer.h"
#include "train/precision.h"

namespace dspark::train {
namespace {

using dspark::testing::TempDir;
using dspark::train::testing::pipeline;
using dspark::train::testing::step_losses;
using dspark::train::testing::tiny_config;

TEST(DrafterLosses, BlockLossMatchesHandComputation) {
  const int M = 3, V = 4;
  const double z[M][V] = {{1.0, 0.5, -1.0, 0.0}, {0.2, 0.1, 0.3, -0.4}, {2.0, -2.0, 0.0, 1.0}};
  const double t[M][V] = {{0.5, 1.0, 0.0, -0.5}, {0.0, 0.0, 0.0, 0.0}, {1.0, 1.0, 1.0, 3.0}};
  const int64_t label[M] = {1, 2, 3};
  const float valid[M] = {1, 1, 0};  // the last slot is past the supervised prefix
  const int64_t slot[M] = {1, 2, 3};
  const double conf[M] = {0.3, -1.2, 0.7};
  auto to_t = [](const double (*a)[V]) {
    std::vector<float> v;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < V; ++j) v.push_back(float(a[i][j]));
    return torch::tensor(v).view({M, V});
  };
  LossWeights w{0.1, 0.9, 1.0, 4.0};
  LossParts got = block_loss(to_t(z), to_t(t), torch::tensor(std::vector<int64_t>(label, label + M)),
                             torch::tensor(std::vector<float>(valid, valid + M)),
                             torch::tensor(std::vector<int64_t>(slot, slot + M)),
                             torch::tensor(std::vector<float>({float(conf[0]), float(conf[1]), float(conf[2])})), w);
  // By hand.
  double ws = 0, ce = 0, l1 = 0, bce = 0;
  for (int i = 0; i < M; ++i) {
    double zmax = -1e9, tmax = -1e9, zs = 0, ts = 0;
    for (int j = 0; j < V; ++j) zmax = std::max(zmax, z[i][j]), tmax = std::max(tmax, t[i][j]);
    for (int j = 0; j < V; ++j) zs += std::exp(z[i][j] - zmax), ts += std::exp(t[i][j] - tmax);
    double dist = 0;
    for (int j = 0; j < V; ++j) dist += std::abs(std::exp(z[i][j] - zmax) / zs - std::exp(t[i][j] - tmax) / ts);
    const double wk = std::exp(-(slot[i] - 1) / 4.0) * valid[i];
    const double c_star = std::clamp(1.0 - 0.5 * dist, 0.0, 1.0);
    const double sig = 1 / (1 + std::exp(-conf[i]));
    ws += wk;
    ce += wk * -(z[i][label[i]] - zmax - std::log(zs));
    l1 += wk * dist;
    bce += wk * -(c_star * std::log(sig) + (1 - c_star) * std::log(1 - sig));
  }
  EXPECT_NEAR(got.weight_sum, ws, 1e-6);
  EXPECT_NEAR(got.ce.item<double>(), ce / ws, 1e-5);
  EXPECT_NEAR(got.l1.item<double>(), l1 / ws, 1e-5);
  EXPECT_NEAR(got.conf.item<double>(), bce / ws, 1e-5);
  EXPECT_NEAR(got.total.item<double>(), (0.1 * ce + 0.9 * l1 + bce) / ws, 1e-5);
}

TEST(DrafterBlocks, AnchorsAndMasksMatchBruteForce) {
  //                  0  1  2  3  4  5  6  7  8  9 10 11
  const std::vector<uint8_t> mask = {0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1};
  std::vector<int32_t> tokens;
  for (int i = 0; i < 12; ++i) tokens.push_back(100 + i);
  std::set<int64_t> eligible;
  for (int a = 0; a + 1 < 12; ++a)
    if (mask[size_t(a)] && mask[size_t(a + 1)]) eligible.insert(a);
  std::map<int64_t, int> seen;
  Rng rng(3);
  for (int trial = 0; trial < 2000; ++trial) {
    auto anchors = sample_anchors(mask, 3, rng);
    ASSERT_EQ(anchors.size(), 3u);
    ASSERT_TRUE(std::is_sorted(anchors.begin(), anchors.end()));
    ASSERT_EQ(std::set<int64_t>(anchors.begin(), anchors.end()).size(), 3u);
    for (int64_t a : anchors) {
      ASSERT_TRUE(eligible.count(a)) << a;
      ++seen[a];
    }
  }
  // Uniform over the 6 eligible anchors: each appears in half of the 2000 draws of 3.
  for (int64_t a : eligible) EXPECT_NEAR(seen[a], 1000, 120) << a;
  EXPECT_EQ(sample_anchors(mask, 50, rng).size(), eligible.size());

  const std::vector<int64_t> anchors = {3, 8};
  const int g = 4, mask_id = 7;
  for (BlockLayout layout : {BlockLayout::AnchorFirst, BlockLayout::MaskOnly}) {
    Blocks b = build_blocks(tokens, mask, anchors, g, mask_id, layout);
    for (int j = 0; j < 2; ++j) {
      const int64_t a = anchors[size_t(j)];
      bool ok = true;
      for (int k = 0; k < g; ++k) {
        EXPECT_EQ(b.inputs[j][k].item<int64_t>(), k == 0 ? tokens[size_t(a)] : mask_id);
        EXPECT_EQ(b.positions[j][k].item<int64_t>(), a + k);
        const int64_t y = layout == BlockLayout::AnchorFirst ? a + k + 1 : a + k;
        const bool predicts = layout == BlockLayout::AnchorFirst || k > 0;
        ok = ok && predicts && y < 12 && mask[size_t(y)];
        if (!predicts) ok = true;  // slot 0 of a DFlash block neither predicts nor breaks the prefix
        const bool valid = predicts && ok;
        EXPECT_EQ(b.valid[j][k].item<float>(), valid ? 1.f : 0.f) << "block " << j << " slot " << k;
        if (valid) {
          EXPECT_EQ(b.labels[j][k].item<int64_t>(), tokens[size_t(y)]);
          EXPECT_EQ(b.target_pos[j][k].item<int64_t>(), y - 1);
          EXPECT_EQ(b.prev[j][k].item<int64_t>(), tokens[size_t(y - 1)]);
        }
      }
    }
  }
  // The attention mask, brute force: block j slot k sees context t < a_j (with a window w,
  // a_j - w <= t too) and its own block.
  for (int w : {0, 3}) {
    auto m = block_attention_mask(torch::tensor(anchors), 12, g, w);
    ASSERT_EQ(m.size(0), 8);
    ASSERT_EQ(m.size(1), 12 + 8);
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 20; ++c) {
        const int j = r / g;
        const int a = int(anchors[size_t(j)]);
        const bool visible = c < 12 ? c < a && (w == 0 || c >= a - w) : (c - 12) / g == j;
        EXPECT_EQ(std::isinf(m[r][c].item<float>()), !visible) << "window " << w << ": " << r << "," << c;
      }
  }
}

TEST(DrafterE2E, TrainedDraftersLoadAndRunInTheEngine) {
  auto model = Model::load(pipeline().target, LoadOptions{DType::F32});
  auto tok = Tokenizer::from_dir(pipeline().target);
  for (SpecMethod method : {SpecMethod::DSpark, SpecMethod::DFlash, SpecMethod::Eagle3}) {
    TempDir run;
    DrafterTrainConfig c = tiny_config(method, run.path());
    const double loss = train_drafter(c);
    EXPECT_TRUE(std::isfinite(loss)) << spec_method_name(method);
    const std::string drafter = (std::filesystem::path(run.path()) / "drafter").string();
    SpecConfig sc = SpecConfig::parse(nlohmann::json{{"model", drafter}}.dump());
    EXPECT_EQ(sc.method_given, false);
    auto d = load_drafter(sc, *model, DType::F32);
    EXPECT_EQ(sc.method, method);
    KvCache kv(model->config().num_layers, model->config().num_kv_heads, model->config().head_dim, DType::F32, 4096);
    Forward fwd(*model, kv);
    GenerateParams gp;
    gp.max_tokens = 24;
    FullBlockPolicy full;
    auto decode = [&](Drafter& drafter, SpecConfig& spec, SpecMetrics& m) {
      auto res = spec_generate(fwd, *tok, std::vector<int32_t>{301, 10, 20, 30}, gp, drafter, spec, full, m);
      return res.tokens;
    };
    SpecMetrics m;
    const auto tokens = decode(*d, sc, m);
    EXPECT_GT(m.rounds, 0) << spec_method_name(method);
    EXPECT_GE(m.mean_accepted_length(), 1.0);
    std::printf("%s: %ld rounds, %.2f tokens per round after 3 training steps\n", spec_method_name(method),
                long(m.rounds), m.mean_accepted_length());
    // The trained drafter with a reduced draft vocabulary from the same regenerated data, through
    // the CLI: it loads and, in f32 greedy, gives the same (lossless) output.
    const std::string reduced = (std::filesystem::path(run.path()) / "reduced").string();
    const std::string cmd = std::string(DSPARK_BIN) + " drafter reduce-vocab --model " + pipeline().target + " --drafter " +
                            drafter + " --data " + pipeline().regen + " --size 64 --out " + reduced + " --json > " +
                            reduced + ".json";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto report = nlohmann::json::parse(read_text_file(reduced + ".json"));
    EXPECT_EQ(report["draft_vocab_size"], 64);
    EXPECT_GT(report["response_token_coverage"].get<double>(), 0.5) << report.dump();
    EXPECT_EQ(DrafterConfig::load(reduced).draft_vocab_size, 64);
    SpecConfig rsc = SpecConfig::parse(nlohmann::json{{"model", reduced}}.dump());
    auto rd = load_drafter(rsc, *model, DType::F32);
    SpecMetrics rm;
    EXPECT_EQ(decode(*rd, rsc, rm), tokens) << spec_method_name(method) << " with a reduced draft vocabulary";
    EXPECT_GT(rm.rounds, 0);
  }
}

// Three training steps from the 0.02-std init leave every layer close to the identity and the
// logits close to uniform; matrices 8x larger (stored in f32) make each layer move the logits.
void scale_matrices(const std::string& drafter_dir) {
  const std::string file = (std::filesystem::path(drafter_dir) / "model.safetensors").string();
  SafetensorsWriter w;
  {
    SafetensorsFile f(file);
    for (const auto& [name, v] : f.tensors()) {
      if (v.dtype == DType::I64 || v.dtype == DType::BOOL || v.shape.size() < 2) {
        w.add(name, v.dtype, v.shape, v.data);
        continue;
      }
      std::vector<float> x(size_t(v.numel()));
      convert_to_f32(v.dtype, v.data, x.data(), x.size());
      for (float& e : x) e *= 8.f;
      w.add_f32(name, v.shape, x.data(), DType::F32);
    }
  }
  w.write(file);
}

// max |log p - log q| of the trainer's logits row against the engine's q row, and how far the
// logits spread (so that a flat row cannot pass by accident).
std::pair<float, float> log_gap(const torch::Tensor& logits_row, const float* q, int vocab) {
  auto lp = torch::log_softmax(logits_row, -1);
  EXPECT_EQ(lp.size(0), vocab);
  float worst = 0, spread = 0;
  for (int v = 0; v < vocab; ++v) {
    worst = std::max(worst, std::abs(lp[v].item<float>() - std::log(q[v])));
    spread = std::max(spread, std::abs(lp[v].item<float>() - lp[0].item<float>()));
  }
  return {worst, spread};
}

// The engine drafter's k proposals (sampled at T=1, so their q rows are the softmax of its logits)
// after the context x_0..x_{n-1} of sample `s` with its target features, anchored at x_n.
Draft propose_after(Drafter& d, const datagen::HiddenDataset::Sample& s, int n, int k, uint64_t seed) {
  const int64_t width = int64_t(s.layers) * s.hidden;
  std::vector<float> feats;
  for (int r = 0; r < n; ++r) feats.insert(feats.end(), s.at(r, 0), s.at(r, 0) + width);
  const int seq = d.begin();
  d.extend(seq, std::span<const int32_t>(s.tokens.data(), size_t(n)), 0, TargetFeatures{feats.data(), n, int(width)});
  Rng rng(seed, 1);
  DraftSampling ds;
  ds.probabilistic = true;
  ds.params.temperature = 1.0f;
  ds.rng = &rng;
  Draft draft;
  d.propose(seq, s.tokens[size_t(n)], n, k, ds, draft);
  d.end(seq);
  return draft;
}

// The engine's EAGLE-3 proposals against the trainer's training-time-test unrolling, for one and
// two layers: after the prefix x_0..x_t, the engine's q for draft k equals the softmax of the
// trainer's step-k logits at position t once the sequence holds the engine's own drafts after
// x_{t+1} (step k reads token t + 1 + k; later positions cannot reach position t). This covers
// the fused first layer, the plain upper layers, their KV caches and the chaining of outputs.
TEST(DrafterParity, Eagle3EngineProposalsMatchTheTrainersUnrolledSteps) {
  auto model = Model::load(pipeline().target, LoadOptions{DType::F32});
  datagen::HiddenDataset data = datagen::HiddenDataset::open(pipeline().hidden);
  const int D = 4;
  // (layers, sliding_window): a window of 3 rows hides most of each row's context.
  for (auto [layers, window] : {std::pair{1, 0}, std::pair{2, 0}, std::pair{1, 3}, std::pair{2, 3}}) {
    TempDir run;
    DrafterTrainConfig c = tiny_config(SpecMethod::Eagle3, run.path());
    c.layers = layers;
    c.drafts = D;
    c.sliding_window = window;
    train_drafter(c);
    const std::string dir = (std::filesystem::path(run.path()) / "drafter").string();
    EXPECT_EQ(DrafterConfig::load(dir).layers.num_layers, layers);
    EXPECT_EQ(DrafterConfig::load(dir).sliding_window, window);
    scale_matrices(dir);
    SpecConfig sc = SpecConfig::parse(nlohmann::json{{"model", dir}, {"num_speculative_tokens", D}}.dump());
    auto d = load_drafter(sc, *model, DType::F32);
    int checked = 0;
    for (size_t i = 0; i < data.size() && checked < 3; ++i) {
      datagen::HiddenDataset::Sample s = data.load(i);
      const int T = int(s.tokens.size()), t = T - D - 2;
      if (t < 2) continue;
      const Draft draft = propose_after(*d, s, t + 1, D, 5 + i);
      ASSERT_EQ(int(draft.tokens.size()), D);
      datagen::HiddenDataset::Sample teacher = s;
      for (int k = 0; k + 1 < D; ++k) teacher.tokens[size_t(t + 2 + k)] = draft.tokens[size_t(k)];
      const auto ref = eagle3_step_logits(dir, pipeline().target, teacher, D);
      ASSERT_EQ(int(ref.size()), D);
      for (int k = 0; k < D; ++k) {
        const auto [worst, spread] = log_gap(ref[size_t(k)][t], draft.q.data() + int64_t(k) * draft.vocab, draft.vocab);
        EXPECT_LT(worst, 1e-3f) << layers << " layer(s), window " << window << ", sample " << i << ", draft " << k;
        EXPECT_GT(spread, 0.5f) << "the logits are too flat to tell layers apart";
      }
      ++checked;
    }
    EXPECT_EQ(checked, 3) << "too few samples long enough";
  }
}

// The engine's DSpark (two layers) and DFlash (one layer) proposals against the trainer's block
// pass: after the context x_0..x_{a-1}, the engine's q for each draft equals the softmax of the
// trainer's slot logits for the block anchored at a, with DSpark's Markov bias teacher-forced on
// the engine's own drafts. This covers the context injection, the block attention mask (with and
// without a sliding window of 4 context positions), the layers, the lm_head and the Markov head.
TEST(DrafterParity, BlockEngineProposalsMatchTheTrainersBlockPass) {
  auto model = Model::load(pipeline().target, LoadOptions{DType::F32});
  datagen::HiddenDataset data = datagen::HiddenDataset::open(pipeline().hidden);
  for (auto [method, window] : {std::pair{SpecMethod::DSpark, 0}, std::pair{SpecMethod::DFlash, 0},
                                std::pair{SpecMethod::DSpark, 4}, std::pair{SpecMethod::DFlash, 4}}) {
    const bool dspark = method == SpecMethod::DSpark;
    TempDir run;
    DrafterTrainConfig c = tiny_config(method, run.path());
    c.layers = dspark ? 2 : 1;
    c.sliding_window = window;
    train_drafter(c);
    const std::string dir = (std::filesystem::path(run.path()) / "drafter").string();
    scale_matrices(dir);
    const DrafterConfig dc = DrafterConfig::load(dir);
    EXPECT_EQ(dc.sliding_window, window);
    const int drafts = dspark ? dc.block_size : dc.block_size - 1;
    SpecConfig sc = SpecConfig::parse(nlohmann::json{{"model", dir}, {"num_speculative_tokens", drafts}}.dump());
    auto d = load_drafter(sc, *model, DType::F32);
    int checked = 0;
    for (size_t i = 0; i < data.size() && checked < 3; ++i) {
      datagen::HiddenDataset::Sample s = data.load(i);
      const int T = int(s.tokens.size()), a = T - dc.block_size - 2;
      if (a < 2) continue;
      const Draft draft = propose_after(*d, s, a, drafts, 9 + i);
      ASSERT_EQ(int(draft.tokens.size()), drafts);
      datagen::HiddenDataset::Sample teacher = s;
      if (dspark)  // slot k's Markov input is the token at a + k: the engine's draft k - 1
        for (int k = 0; k + 1 < drafts; ++k) teacher.tokens[size_t(a + 1 + k)] = draft.tokens[size_t(k)];
      const torch::Tensor ref = block_draft_logits(dir, pipeline().target, teacher, a);
      for (int k = 0; k < drafts; ++k) {
        const int slot = dspark ? k : k + 1;  // DFlash: slot 0 is the anchor, slot k >= 1 drafts k - 1
        const auto [worst, spread] = log_gap(ref[slot], draft.q.data() + int64_t(k) * draft.vocab, draft.vocab);
        EXPECT_LT(worst, 1e-3f) << spec_method_name(method) << ", window " << window << ", sample " << i << ", draft " << k;
        EXPECT_GT(spread, 0.5f) << "the logits are too flat to tell layers apart";
      }
      ++checked;
    }
    EXPECT_EQ(checked, 3) << "too few samples long enough";
  }
}

// max |a - b| over two logit tensors, relative to the largest |a|.
double relative_gap(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / a.abs().max().item<double>();
}

// The trainer's logits of the drafter saved in `dir` on the first sample long enough for one block
// (or the EAGLE-3 steps), in f32 or under the training's bf16 autocast.
torch::Tensor drafter_logits(SpecMethod method, const std::string& dir, bool bf16) {
  datagen::HiddenDataset data = datagen::HiddenDataset::open(pipeline().hidden);
  const DrafterConfig dc = DrafterConfig::load(dir);
  for (size_t i = 0; i < data.size(); ++i) {
    datagen::HiddenDataset::Sample s = data.load(i);
    const int64_t a = int64_t(s.tokens.size()) - 8;
    if (a < 2) continue;
    if (method == SpecMethod::Eagle3) return torch::stack(eagle3_step_logits(dir, pipeline().target, s, dc.speculative_tokens, bf16));
    return block_draft_logits(dir, pipeline().target, s, a, bf16);
  }
  ADD_FAILURE() << "no sample long enough";
  return {};
}

TEST(DrafterPrecision, Bf16AutocastTrainsCloseToF32) {
  // The recipe's bf16 autocast: the same first-step loss as f32 up to bf16 rounding, finite
  // training, and the precision recorded in the log ("auto" resolves by the CPU's bf16 units).
  // libtorch's CPU autocast casts the products to bf16 on every CPU; without AVX512-BF16 or AMX it
  // emulates them (same rounding, far slower), and the trainer says so.
  EXPECT_EQ(precision_note("bf16").empty(), cpu_features().avx512_bf16 || cpu_features().amx_bf16);
  EXPECT_TRUE(precision_note("f32").empty());
  EXPECT_TRUE(precision_note("auto").empty());
  auto start_event = [](const std::string& run) {
    std::ifstream log(std::filesystem::path(run) / "train_log.jsonl");
    std::string first;
    std::getline(log, first);
    return nlohmann::json::parse(first);
  };
  for (SpecMethod method : {SpecMethod::DSpark, SpecMethod::Eagle3}) {
    const char* name = spec_method_name(method);
    TempDir f32, bf16, autop;
    DrafterTrainConfig c = tiny_config(method, f32.path());
    train_drafter(c);
    c.out = bf16.path();
    c.precision = "bf16";
    const double last = train_drafter(c);
    EXPECT_TRUE(std::isfinite(last)) << name;
    EXPECT_EQ(start_event(f32.path())["precision"], "f32");
    EXPECT_EQ(start_event(bf16.path())["precision"], "bf16");
    const auto fa = step_losses(f32.path()), fb = step_losses(bf16.path());
    ASSERT_EQ(fa.size(), 3u);
    ASSERT_EQ(fb.size(), 3u);
    for (size_t k = 0; k < fa.size(); ++k) EXPECT_TRUE(std::isfinite(fb[k])) << name << " step " << k;
    EXPECT_NEAR(fb[0], fa[0], 0.02 * fa[0]) << name << ": bf16 autocast strays from f32";
    // That bf16 computes in bf16 is checked on the logits, not on the loss: at its near-uniform
    // initial logits EAGLE-3's soft CE moves by about one f32 ulp per sample under bf16 (18.451107
    // against 18.4511032, ...), and four such moves can cancel exactly in the batch mean (they did on
    // an AVX2 CPU), so an equal first-step loss proves nothing. Logits of a drafter whose layers move
    // them (scaled as in the parity tests) differ by bf16 rounding, about 2^-9 of their size, where
    // f32 differs by nothing.
    const std::string dir = (std::filesystem::path(f32.path()) / "drafter").string();
    scale_matrices(dir);
    const torch::Tensor ref = drafter_logits(method, dir, false);
    ASSERT_TRUE(ref.defined());
    EXPECT_EQ(relative_gap(ref, drafter_logits(method, dir, false)), 0.0) << name << ": f32 is not deterministic";
    const double gap = relative_gap(ref, drafter_logits(method, dir, true));
    std::printf("%s: bf16 autocast logits differ from f32 by %.2e of their scale\n", name, gap);
    EXPECT_GT(gap, 1e-4) << name << ": bf16 autocast computed in f32";
    EXPECT_LT(gap, 0.1) << name << ": bf16 autocast strays from f32";
    c.out = autop.path();
    c.precision = "auto";
    c.steps = 1;
    train_drafter(c);
    EXPECT_EQ(start_event(autop.path())["precision"], cpu_features().avx512_bf16 || cpu_features().amx_bf16 ? "bf16" : "f32");
  }
  DrafterTrainConfig bad = tiny_config(SpecMethod::DSpark, "unused");
  bad.precision = "fp16";
  try {
    train_drafter(bad);
    ADD_FAILURE() << "precision fp16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--precision"), std::string::npos) << e.what();
  }
}

TEST(DrafterDDP, TwoGlooProcessesMatchOneAtTheSameGlobalBatch) {
  TempDir one, two;
  train_drafter(tiny_config(SpecMethod::DSpark, one.path()));
  const auto& p = pipeline();
  const std::string common = std::string(DSPARK_TRAIN_BIN) + " drafter --method dspark --target " + p.target +
                             " --data " + p.hidden + " --out " + two.path() +
                             " --layers 1 --drafts 4 --markov-rank 8 --anchors 16 --steps 3 --batch 4 --lr 1e-3"
                             " --threads 1 --validation-fraction 0.1 --precision f32 --world-size 2 --master-port 29631";
  const std::string cmd = common + " --rank 1 > " + two.path() + "/rank1.log 2>&1 & " + common + " --rank 0 > " +
                          two.path() + "/rank0.log 2>&1; wait";
  ASSERT_EQ(std::system(("sh -c '" + cmd + "'").c_str()), 0) << cmd;
  const auto a = step_losses(one.path()), b = step_losses(two.path());
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4 * std::abs(a[i])) << "step " << i;
}

}  // namespace
}  // namespace dspark::train
