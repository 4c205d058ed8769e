// Training checkpoints with exact resume: weights, optimizer state, and loop state, each file
// checked by CRC32. A checkpoint directory appears atomically (written aside, then renamed).
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace dspark::train {

struct CheckpointState {
  int64_t step = 0;    // optimizer steps completed
  int64_t tokens = 0;  // training tokens consumed
  nlohmann::json extra;  // the run's configuration and anything the trainer needs to continue
};

// Writes <run_dir>/checkpoint-<step>/ {weights.safetensors, optimizer.pt, state.json} and
// points <run_dir>/latest at it. Keeps the newest `keep` checkpoints.
void save_checkpoint(const std::string& run_dir, torch::nn::Module& model, torch::optim::Optimizer& opt,
                     const CheckpointState& state, int keep = 2);

// The newest complete checkpoint directory of a run, if any.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

// Loads a checkpoint into model and optimizer. Throws Error naming the file when anything is
// missing, truncated or corrupt (CRC mismatch), or when tensor names or shapes differ.
CheckpointState load_checkpoint(const std::string& checkpoint_dir, torch::nn::Module& model,
                                torch::optim::Optimizer& opt);

}  // namespace dspark::train
