// DrafterConfig: the config.json of a drafter in any supported layout (DeepSpec DSpark,
// z-lab DFlash, vLLM Speculators for DSpark/DFlash/EAGLE-3), normalised.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"
#include "spec_decode/spec_config.h"

namespace dspark {

struct DrafterConfig {
  SpecMethod method = SpecMethod::DSpark;
  ModelConfig layers;              // the draft layers' transformer config (num_layers = draft depth)
  std::vector<int> target_layer_ids;  // 0-based decoder-layer outputs of the target (-1: embeddings)
  int num_target_layers = 0;       // the target's depth the drafter was built for (0: unknown)
  int block_size = 0;              // DSpark: drafts per pass; DFlash: block incl. the anchor
  int mask_token_id = -1;
  int markov_rank = 0;
  std::string markov_head_type = "vanilla";  // vanilla | gated | rnn
  bool confidence_head = false;
  bool confidence_with_markov = true;
  std::vector<float> sts_temperatures;  // per-position confidence temperatures (calibration)
  int draft_vocab_size = 0;        // a reduced draft vocabulary (d2t / t2d tensors); 0: the target's
  // DSpark / DFlash with a draft vocabulary: whether the checkpoint keeps the full-vocabulary head
  // (no lm_head of its own, or one of the target's rows; the draft vocabulary's rows are copied
  // from it at load); false when its head holds only the draft vocabulary. Either way every round
  // drafts over the draft vocabulary. Set by draft_vocab_map.
  bool keeps_full_head = true;
  bool norm_before_residual = true;   // EAGLE-3
  // config.json's "sliding_window" (null, absent, or beside "use_sliding_window": false: none):
  // DSpark / DFlash blocks attend to the last sliding_window context positions before their
  // anchor, and an EAGLE-3 row to the last sliding_window rows up to its own, so a round costs the
  // same at any context length. 0: the whole context.
  int sliding_window = 0;
  int speculative_tokens = 0;      // the drafter's own default (0: none)
  // Run-time, not in config.json: the speculative config's "quantization": "int8" (the drafter's
  // matrices in weight-only int8 after loading; see quantize_int8_if_paired).
  bool int8_weights = false;
  std::string format;              // "deepspec", "zlab", "speculators"
  std::string path;                // the config.json read

  static DrafterConfig load(const std::string& dir);
  // DeepSpec-style config.json for a DSpark/DFlash drafter (what dspark's trainer writes).
  nlohmann::json to_deepspec_json() const;
};

}  // namespace dspark
