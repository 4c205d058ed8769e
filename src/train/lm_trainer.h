// Target language-model training: next-token prediction on a tokenized corpus.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "model/config.h"
#include "train/qwen3_model.h"

namespace dspark::train {

struct LmTrainConfig {
  ModelConfig model;
  std::string init_from;        // optional HF directory to start from
  std::string tokenizer;        // tokenizer.json (copied into every saved model)
  std::string data;             // tokenized corpus directory (dspark corpus tokenize)
  std::vector<std::string> domains;  // empty: all
  std::string out;              // run directory: checkpoints, log, final model
  int64_t steps = 1000;
  int batch = 8;                // sequences per micro-batch
  int accum = 1;                // micro-batches per optimizer step
  int seq_len = 512;
  double lr = 1e-3;
  double min_lr_ratio = 0.1;
  int64_t warmup = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip = 1.0;
  double init_std = 0.02;
  uint64_t seed = 1234;
  std::string precision = "auto";  // auto | f32 | bf16 (autocast, f32 master weights)
  int threads = 0;
  int64_t eval_every = 200;
  int eval_windows = 16;        // validation windows per domain
  int64_t save_every = 200;
  bool resume = false;
  int64_t stop_after = -1;      // stop (with a checkpoint) after this many steps in this run; for tests

  nlohmann::json to_json() const;
};

// AdamW with decoupled weight decay on matrices only, as train_lm uses it.
std::unique_ptr<torch::optim::AdamW> build_optimizer(CausalLM& model, const LmTrainConfig& cfg);

// Trains (or resumes) and writes <out>/model (HF directory) at the end. Returns the final loss.
double train_lm(const LmTrainConfig& cfg);

// Mean next-token loss per domain on a split of a tokenized corpus, over `windows` evenly
// spaced windows per domain.
nlohmann::json evaluate_lm(const std::string& model_dir, const std::string& data, const std::string& split,
                           int windows, int seq_len);

}  // namespace dspark::train
