// Shared pieces of the drafter-trainer tests: one tiny target with regenerated responses and
// their hidden states (built once per test binary), a tiny training configuration, and the losses
// of a run's log.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../datagen/fixtures.h"
#include "core/dtype.h"
#include "datagen/hidden.h"
#include "datagen/regenerate.h"
#include "train/drafter_trainer.h"

namespace dspark::train::testing {

using dspark::testing::TempDir;

// One tiny target, regenerated responses and hidden states, shared by the tests.
struct Pipeline {
  TempDir dir;
  std::string target, regen, hidden;
  Pipeline() {
    target = dir.sub("target");
    auto tok_path = dir.write("target/tokenizer.json", dspark::testing::tiny_tokenizer_json(300));
    ModelConfig cfg = dspark::testing::tiny_config();
    save_model_dir(cfg, dspark::testing::BiasedSource(7, dspark::testing::kImEnd, 0.25f), target, DType::F32);
    auto model = Model::load(target, LoadOptions{DType::F32});
    auto tok = Tokenizer::from_file(tok_path);
    datagen::RegenOptions ro;
    ro.max_tokens = 40;
    ro.batch = 8;
    ro.progress = false;
    ro.log = [](const std::string&) {};
    regen = (std::filesystem::path(dir.path()) / "regen.jsonl").string();
    datagen::regenerate(*model, *tok, dspark::testing::some_prompts(24), regen, ro);
    datagen::HiddenOptions ho;
    ho.layer_ids = {0, 2};
    ho.progress = false;
    ho.log = [](const std::string&) {};
    hidden = dir.sub("hidden");
    datagen::extract_hidden(*model, regen, hidden, ho);
  }
};

// Inline: one pipeline for every file of the binary.
inline Pipeline& pipeline() {
  static Pipeline p;
  return p;
}

inline DrafterTrainConfig tiny_config(SpecMethod method, const std::string& out) {
  DrafterTrainConfig c;
  c.method = method;
  c.target = pipeline().target;
  c.data = pipeline().hidden;
  c.out = out;
  c.layers = 1;
  c.drafts = 4;
  c.markov_rank = 8;
  c.anchors = 16;
  c.steps = 3;
  c.batch = 4;
  c.lr = 1e-3;
  c.threads = 1;
  c.validation_fraction = 0.1;
  c.precision = "f32";  // the same arithmetic on every CPU; bf16 has its own test
  return c;
}

// The per-step losses of a run's train_log.jsonl, in step order.
inline std::vector<double> step_losses(const std::string& run) {
  std::vector<double> out;
  std::ifstream log(std::filesystem::path(run) / "train_log.jsonl");
  for (std::string l; std::getline(log, l);) {
    auto j = nlohmann::json::parse(l);
    if (j.contains("loss") && !j.contains("event")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

}  // namespace dspark::train::testing
