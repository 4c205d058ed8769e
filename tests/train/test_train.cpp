// Trainer pieces: the libtorch model against the engine, one optimizer step against a
// hand-computed AdamW update, the learning-rate schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "model/forward.h"
#include "train/lm_trainer.h"
#include "train/qwen3_model.h"
#include "train/schedule.h"

namespace dspark::train {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("dspark_train_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

ModelConfig tiny(Arch arch) {
  ModelConfig c = shape_config(arch == Arch::Qwen3 ? "tiny-qwen3" : "tiny-llama");
  c.vocab_size = 301;
  c.max_position_embeddings = 256;
  return c;
}

// The trainer's model and the engine compute the same logits (f32), so what is trained is
// what is served.
TEST(TrainParity, EngineLogitsMatchTrainerLogits) {
  for (Arch arch : {Arch::Qwen3, Arch::Llama}) {
    ModelConfig c = tiny(arch);
    CausalLM m(c);
    m->init_weights(0.2, 7);
    {
      // Norm weights away from 1, so a missing norm would show.
      torch::NoGradGuard ng;
      for (auto& p : m->parameters())
        if (p.dim() == 1) p.add_(torch::randn(p.sizes()) * 0.2);
    }
    auto dir = temp_dir(arch == Arch::Qwen3 ? "parity_qwen3" : "parity_llama");
    save_hf(m, dir.string(), DType::F32);
    std::vector<int32_t> ids;
    for (int i = 0; i < 70; ++i) ids.push_back((i * 37 + 11) % c.vocab_size);
    auto tokens = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
    torch::NoGradGuard ng;
    auto want = m->forward(tokens).logits.squeeze(0).contiguous();

    auto engine = Model::load(dir.string(), LoadOptions{DType::F32});
    KvCache kv(c.num_layers, c.num_kv_heads, c.head_dim, DType::F32, 256);
    Forward fwd(*engine, kv);
    int seq = kv.create_sequence();
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], int(i), seq, true);
    const ForwardOutput& out = fwd.run(b, {});
    const float scale = want.abs().max().item<float>();
    ASSERT_GT(scale, 1.f);
    float worst = 0;
    for (int r = 0; r < out.n_out; ++r)
      for (int v = 0; v < out.vocab; ++v) worst = std::max(worst, std::abs(out.logits_row(r)[v] - want[r][v].item<float>()));
    EXPECT_LE(worst, 1e-4f * scale) << "max-abs " << worst << " scale " << scale;
    fs::remove_all(dir);
  }
}

// One optimizer step of the trainer's AdamW configuration equals the update written out by hand.
TEST(TrainOptimizer, OneStepMatchesHandComputedAdamW) {
  ModelConfig c = tiny(Arch::Qwen3);
  c.num_layers = 1;
  CausalLM m(c);
  m->init_weights(0.1, 3);
  LmTrainConfig tc;
  tc.model = c;
  tc.lr = 0.01;
  tc.beta1 = 0.9;
  tc.beta2 = 0.95;
  tc.eps = 1e-8;
  tc.weight_decay = 0.1;
  auto opt = build_optimizer(m, tc);
  // A known gradient on every parameter.
  std::vector<torch::Tensor> before, grads;
  for (auto& p : m->parameters()) {
    before.push_back(p.detach().clone());
    auto g = torch::sin(torch::arange(p.numel(), torch::kFloat32).reshape(p.sizes()) * 0.37) * 0.5;
    p.mutable_grad() = g.clone();
    grads.push_back(g);
  }
  opt->step();
  size_t i = 0;
  for (auto& p : m->parameters()) {
    // AdamW, first step: m = (1-b1) g, v = (1-b2) g^2, bias corrections 1-b1, 1-b2.
    const double wd = p.dim() >= 2 ? tc.weight_decay : 0.0;
    auto g = grads[i].to(torch::kFloat64);
    auto m_hat = (1 - tc.beta1) * g / (1 - tc.beta1);
    auto v_hat = (1 - tc.beta2) * g * g / (1 - tc.beta2);
    auto w0 = before[i].to(torch::kFloat64);
    auto want = w0 * (1 - tc.lr * wd) - tc.lr * m_hat / (v_hat.sqrt() + tc.eps);
    EXPECT_LT((p.detach().to(torch::kFloat64) - want).abs().max().item<double>(), 1e-6) << "parameter " << i;
    ++i;
  }
}

TEST(TrainSchedule, WarmupThenCosineToFloor) {
  LrSchedule s{1e-3, 10, 110, 0.1};
  EXPECT_NEAR(s.at(0), 1e-4, 1e-12);
  EXPECT_NEAR(s.at(9), 1e-3, 1e-12);
  EXPECT_NEAR(s.at(10), 1e-3, 1e-12);
  EXPECT_NEAR(s.at(60), 1e-3 * (0.1 + 0.9 * 0.5), 1e-12);  // halfway through the cosine
  EXPECT_NEAR(s.at(110), 1e-4, 1e-12);
  for (int i = 11; i < 110; ++i) EXPECT_LE(s.at(i), s.at(i - 1));
}

}  // namespace
}  // namespace dspark::train
