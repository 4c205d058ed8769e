// Drafter training on regenerated data (dspark datagen regenerate's JSONL), the target computing
// the hidden states in the trainer (train/drafter_samples.h), and the --device flag: the states
// equal those `dspark datagen hidden` stores, a run trains as it does on that dataset, and data
// that cannot train is refused naming the file, record, field or flag.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../error_of.h"
#include "core/crc32.h"
#include "drafter_fixtures.h"
#include "train/drafter_samples.h"

namespace dspark::train {
namespace {

namespace fs = std::filesystem;
using dspark::testing::error_of;
using dspark::testing::slurp;
using dspark::testing::TempDir;
using dspark::train::testing::pipeline;
using dspark::train::testing::step_losses;
using dspark::train::testing::tiny_config;

double max_abs(const torch::Tensor& t) {
  return t.abs().max().item<double>();
}

TEST(DrafterSamples, RegeneratedDataGivesTheHiddenStatesTheDatasetHolds) {
  const auto& p = pipeline();  // the dataset taps layers {0, 2} of the f32 engine
  DrafterData ds = DrafterData::open(p.hidden, p.target, {}, torch::kCPU);
  ASSERT_NE(ds.dataset(), nullptr);
  // In the dataset's order, and reversed (slot k must follow the k-th listed layer, not layer
  // order).
  for (const std::vector<int>& taps : {std::vector<int>{0, 2}, std::vector<int>{2, 0}}) {
    DrafterData rg = DrafterData::open(p.regen, p.target, taps, torch::kCPU);
    EXPECT_EQ(rg.dataset(), nullptr);
    ASSERT_EQ(rg.size(), ds.size());
    EXPECT_EQ(rg.layer_ids(), taps);
    for (size_t i = 0; i < ds.size(); ++i) {
      const TrainSample a = ds.load(i), b = rg.load(i);
      ASSERT_EQ(a.tokens, b.tokens) << i;
      ASSERT_EQ(a.loss_mask, b.loss_mask) << i;
      ASSERT_EQ(b.hidden.sizes(), a.hidden.sizes()) << i;
      for (int slot = 0; slot < 3; ++slot) {
        // The dataset's slot of the layer that b's slot holds (slot 2: the final-normed state).
        const int from = slot == 2 ? 2 : (taps[size_t(slot)] == 0 ? 0 : 1);
        // The dataset stores bf16 (half a bf16 step: up to 2^-8 relative), computed by the engine's
        // f32 kernels (another summation order: 1e-4 of the scale, as TrainModel's logits test
        // allows).
        auto x = a.hidden.select(1, from), y = b.hidden.select(1, slot);
        EXPECT_LE(max_abs(x - y), (std::ldexp(1.0, -8) + 1e-4) * max_abs(x))
            << "sample " << i << " slot " << slot;
      }
    }
  }
}

TEST(DrafterSamples, TrainingOnRegeneratedDataFollowsTheDatasetRun) {
  TempDir a, b;
  DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, a.path());
  train_drafter(c);
  DrafterTrainConfig r = tiny_config(SpecMethod::DSpark, b.path());
  r.data = pipeline().regen;
  r.target_layers = {0, 2};
  train_drafter(r);
  const std::vector<double> la = step_losses(a.path()), lb = step_losses(b.path());
  ASSERT_EQ(la.size(), size_t(c.steps));
  ASSERT_EQ(lb.size(), la.size());
  // The same samples, anchors and initial weights; only the dataset's bf16 rounding of the states
  // differs.
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(lb[i], la[i], 2e-3 * la[i]) << "step " << i;
  EXPECT_TRUE(fs::exists(fs::path(b.path()) / "drafter" / "model.safetensors"));
}

TEST(DrafterSamples, DataThatCannotTrainIsRefusedNamingWhy) {
  const auto& p = pipeline();
  auto refused = [&](const std::function<void(DrafterTrainConfig&)>& edit,
                     const std::vector<std::string>& named) {
    TempDir out;
    DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, out.path());
    c.data = p.regen;
    c.target_layers = {0, 2};
    edit(c);
    const std::string msg = error_of([&] { train_drafter(c); });
    for (const std::string& n : named)
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' in: " << msg;
    EXPECT_FALSE(fs::exists(fs::path(out.path()) / "drafter"));
  };
  refused([](DrafterTrainConfig& c) { c.target_layers.clear(); },
          {"--target-layers", "regenerated"});
  refused([](DrafterTrainConfig& c) { c.target_layers = {0, 9}; }, {"--target-layers", "9"});
  refused([&](DrafterTrainConfig& c) { c.data = p.hidden; }, {"--target-layers", p.hidden});
  refused([](DrafterTrainConfig& c) { c.device = "tpu"; }, {"--device", "tpu"});
  if (!torch::cuda::is_available())
    refused([](DrafterTrainConfig& c) { c.device = "cuda"; }, {"--device cuda"});
  refused([](DrafterTrainConfig& c) { c.device = "cuda:x"; }, {"--device"});

  TempDir t;
  const std::string text = slurp(p.regen);
  // A partial last line: an interrupted regeneration.
  const std::string partial = t.write("partial.jsonl", text + "{\"id\": 999, \"input_ids\": [1, 2");
  refused([&](DrafterTrainConfig& c) { c.data = partial; }, {partial, "incomplete"});
  // A token past the target's vocabulary.
  const std::string line = text.substr(0, text.find('\n'));
  auto j = nlohmann::json::parse(line);
  j["id"] = 12345;
  j["input_ids"][0] = 1 << 20;
  const std::string bad_token = t.write("token.jsonl", text + j.dump() + "\n");
  refused([&](DrafterTrainConfig& c) { c.data = bad_token; }, {bad_token, "id 12345", "1048576"});
  // Two records of one id (two regenerations concatenated without renumbering).
  const std::string twice = t.write("twice.jsonl", text + line + "\n");
  refused([&](DrafterTrainConfig& c) { c.data = twice; }, {twice, "appears twice"});
  // Answers of another target (the CRC32 of its config.json in PATH.meta.json).
  const std::string other = t.write("other.jsonl", text);
  t.write("other.jsonl.meta.json", "{\"config_crc32\": \"deadbeef\"}");
  refused([&](DrafterTrainConfig& c) { c.data = other; },
          {other + ".meta.json", "config_crc32", "--target"});
  // ... while the target's own CRC trains.
  const std::string own = t.write("own.jsonl", text);
  t.write(
      "own.jsonl.meta.json",
      nlohmann::json{{"config_crc32", crc32_hex(crc32_file(p.target + "/config.json"))}}.dump());
  TempDir out;
  DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, out.path());
  c.data = own;
  c.target_layers = {0, 2};
  c.steps = 1;
  EXPECT_EQ(error_of([&] { train_drafter(c); }), "");
}

}  // namespace
}  // namespace dspark::train

namespace dspark::train {
namespace {

TEST(DrafterTimeLimit, TheRunShrinksToTheStepsThatFitAndFinishes) {
  TempDir out;
  DrafterTrainConfig c = tiny_config(SpecMethod::DSpark, out.path());
  c.steps = 200;
  c.time_limit = 1e-6;  // nothing fits past the 20 steps that measure the rate
  train_drafter(c);
  EXPECT_EQ(step_losses(out.path()).size(), 20u);
  const std::string log = slurp(out.path() + "/train_log.jsonl");
  EXPECT_NE(log.find("\"event\":\"time_limit\""), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(fs::path(out.path()) / "drafter" / "model.safetensors"));
  // A limit that the steps fit in changes nothing.
  TempDir all;
  DrafterTrainConfig d = tiny_config(SpecMethod::DSpark, all.path());
  d.steps = 25;
  d.time_limit = 1e6;
  train_drafter(d);
  EXPECT_EQ(step_losses(all.path()).size(), 25u);
  // Several processes would plan different step counts.
  TempDir ddp;
  DrafterTrainConfig e = tiny_config(SpecMethod::DSpark, ddp.path());
  e.time_limit = 10;
  e.world_size = 2;
  e.batch = 4;
  EXPECT_NE(error_of([&] { train_drafter(e); }).find("--time-limit"), std::string::npos);
}

}  // namespace
}  // namespace dspark::train
