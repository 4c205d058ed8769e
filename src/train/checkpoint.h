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

// The start of a run in `run_dir`: with `resume`, loads its latest checkpoint (an error when there
// is none) and returns the checkpoint's path in `resumed_from`; without it, refuses a directory that
// already holds checkpoints when `refuse_existing` (so an earlier run is never silently restarted).
CheckpointState start_or_resume(const std::string& run_dir, bool resume, bool refuse_existing,
                                torch::nn::Module& model, torch::optim::Optimizer& opt,
                                std::string* resumed_from = nullptr);

}  // namespace dspark::train
