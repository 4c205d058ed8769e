// Drafter training on extracted target hidden states (dspark datagen hidden): DSpark (Markov
// and confidence heads), the DFlash baseline (same backbone, CE only), and EAGLE-3 with
// training-time-test unrolling. Data-parallel across processes over libtorch's gloo group.
// Online (cfg.online.enabled, train/online_source.h): the samples come from serving engines that
// export hidden states to a store, each trained exactly once across crashes and --resume.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datagen/hidden_dataset.h"
#include "spec_decode/spec_config.h"
#include "train/online_source.h"

namespace dspark::train {

struct DrafterTrainConfig {
  SpecMethod method = SpecMethod::DSpark;
  std::string target;  // target HF directory (config, frozen embeddings and lm_head)
  std::string data;    // hidden-state dataset (dspark datagen hidden); empty online
  // An existing drafter to start from (its config.json gives the method's shape: layers, block
  // size, Markov head, confidence head, target layers); empty: fresh weights.
  std::string init;
  // Online without --init: the target layers to tap (0-based outputs, -1 the embeddings).
  std::vector<int> target_layers;
  OnlineOptions online;
  std::string out;     // run directory; the drafter is written to OUT/drafter
  int layers = 0;      // decoder layers (EAGLE-3: the fused first layer, then plain ones); 0: 2, EAGLE-3 1
  int drafts = 8;      // drafts per pass: DSpark gamma, DFlash block - 1, EAGLE-3 TTT steps
  int markov_rank = 64;
  std::string markov_head = "vanilla";
  bool confidence = true;
  int anchors = 512;   // per sequence (DSpark / DFlash)
  int sliding_window = 0;  // DrafterConfig::sliding_window (0: the whole context)
  int epochs = 1;
  int64_t steps = 0;   // 0: epochs over the training samples
  int batch = 8;       // sequences per optimizer step (global, over all processes)
  double lr = 6e-4, warmup_ratio = 0.04, min_lr_ratio = 0.0, weight_decay = 0.0, clip = 1.0;
  double ce_weight = 0.1, l1_weight = 0.9, conf_weight = 1.0, decay = 4.0;
  double validation_fraction = 0.02;
  uint64_t seed = 42;
  std::string precision = "auto";
  std::string device = "cpu";  // "cpu", "cuda" or "cuda:N" (train/precision.h)
  int threads = 0;
  int64_t save_every = 200;
  int64_t stop_after = -1;
  // Seconds of training (0: no limit). After the first kTimePlanSteps steps the run measures its
  // rate and shrinks `steps` (and the schedule with it) to what fits; one process, not resumable.
  double time_limit = 0;
  bool resume = false;
  // Data parallel: this process's rank among world_size, rendezvous at master_addr:master_port.
  int rank = 0, world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29511;

  nlohmann::json to_json() const;
};

// The EAGLE-3 training-time-test logits [steps][T - 1, V] (f32) of the drafter saved in
// `drafter_dir` on sample `s`: step k at position t reads token t + 1 + k and the drafter's own
// output of step k - 1 (the target's features at step 0). The reference the engine's proposals
// are tested against. `bf16`: under the bf16 autocast --precision bf16 trains with.
std::vector<torch::Tensor> eagle3_step_logits(const std::string& drafter_dir, const std::string& target_dir,
                                              const datagen::HiddenDataset::Sample& s, int steps, bool bf16 = false);

// The block logits [gamma, V] (f32) of the DSpark or DFlash drafter saved in `drafter_dir` for one
// block anchored at position `anchor` of sample `s` (context: positions < anchor), with DSpark's
// Markov bias teacher-forced on the sample's tokens: the reference the engine's proposals are
// tested against. `bf16`: under the bf16 autocast --precision bf16 trains with.
torch::Tensor block_draft_logits(const std::string& drafter_dir, const std::string& target_dir,
                                 const datagen::HiddenDataset::Sample& s, int64_t anchor, bool bf16 = false);

// Trains and writes OUT/drafter in the format the engine loads. Returns the last step's
// (all-process mean) loss (0 when an online run trained nothing). Refuses (Error naming the flag, manifest field or file) settings out of
// range, an unfinished dataset, a dataset of another target, and a resume that differs from the
// run it resumes in method, target, data or shape.
double train_drafter(const DrafterTrainConfig& cfg);

}  // namespace dspark::train
