// Training progress: the progress line on stderr (core/progress.h) and a JSONL log of every step.
// Thread-safe (the online trainer's workers log events while the training thread logs steps).
#pragma once

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "core/progress.h"

namespace dspark::train {

class Progress {
 public:
  // log_path may be empty (no log). `append` keeps an existing log (resumed runs).
  Progress(int64_t total_steps, const std::string& log_path, bool append);
  ~Progress();
  // Records one step; `fields` must hold "loss" and may hold anything else.
  void step(int64_t step, int64_t tokens, nlohmann::json fields);
  void event(nlohmann::json fields);  // e.g. evaluation results, checkpoints
  void finish();
  // Text appended to the progress line from the next step on (e.g. the online trainer's
  // samples/s, store backlog and requests per server).
  void set_status(std::string status);
  // The run's step count changed (drafter training's --time-limit).
  void set_total(int64_t total_steps);

 private:
  ProgressBar bar_;  // on a terminal every step redraws it
  FILE* log_ = nullptr;
  double start_;
  int64_t start_step_ = -1;
  int64_t start_tokens_ = 0;
  std::string status_;
  std::mutex mu_;
};

}  // namespace dspark::train
