// Training checkpoints with exact resume: weights, optimizer state, and loop state, each file
// checked by CRC32. A checkpoint directory appears atomically (written aside, then renamed).
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

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

// The configuration (CheckpointState::extra) the latest checkpoint of `run_dir` recorded, read
// without loading any tensor; null when the run has no checkpoint.
nlohmann::json latest_checkpoint_config(const std::string& run_dir);

// One field of a run's recorded configuration that a resumed run must repeat, and the flag that
// sets it. `path`: compared as filesystem locations, so "dir" and "./dir/" are the same.
struct ResumeField {
  std::string field, flag;
  bool path = false;
};

// Refuses, naming the flag, a resume whose `now` configuration differs from the `recorded` one in
// any of `fields` (fields the recording lacks are not compared: older runs). Checked before any
// tensor is loaded, so a mismatch is never reported as a tensor shape error or, worse, continues
// silently on other data.
void check_resume_config(const std::string& run_dir, const nlohmann::json& recorded, const nlohmann::json& now,
                         const std::vector<ResumeField>& fields);

}  // namespace dspark::train
