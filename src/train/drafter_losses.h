// Drafter training data and losses (DeepSpec recipe): random anchors, gamma-blocks with
// teacher-forced Markov inputs, and the position-weighted CE + L1 + confidence-BCE loss.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "core/rng.h"

namespace dspark::train {

// Up to `n` anchors drawn uniformly without replacement from positions a with
// loss_mask[a] = loss_mask[a + 1] = 1 (the anchor and the token it predicts are both the
// target's own output); sorted ascending.
std::vector<int64_t> sample_anchors(const std::vector<uint8_t>& loss_mask, int n, Rng& rng);

enum class BlockLayout {
  AnchorFirst,  // DSpark: inputs [x_a, MASK...], slot k predicts x_{a+k+1}; gamma drafts
  MaskOnly,     // DFlash (z-lab): slot k >= 1 predicts x_{a+k}; slot 0 is the anchor, no loss
};

struct Blocks {
  torch::Tensor inputs;      // [N, g] token ids: anchor then the mask token
  torch::Tensor positions;   // [N, g] positions a .. a+g-1
  torch::Tensor labels;      // [N, g] the token each slot predicts (0 where invalid)
  torch::Tensor valid;       // [N, g] 1 on the supervised contiguous prefix, else 0
  torch::Tensor target_pos;  // [N, g] position whose target distribution the slot matches
  torch::Tensor prev;        // [N, g] teacher-forced previous token (Markov / confidence input)
  torch::Tensor slot;        // [N, g] 1-based draft index k of the slot (0 for no prediction)
};

Blocks build_blocks(const std::vector<int32_t>& tokens, const std::vector<uint8_t>& loss_mask,
                    const std::vector<int64_t>& anchors, int gamma, int mask_token, BlockLayout layout);

struct LossWeights {
  double ce = 0.1, l1 = 0.9, conf = 1.0;
  double decay = 4.0;  // w_k = exp(-(k - 1) / decay), k 1-based (DeepSpec uses 4.0)
};

struct LossParts {
  torch::Tensor total, ce, l1, conf;  // each a weighted mean over valid slots
  double weight_sum = 0;
};

// draft_logits [M, V] (Markov bias included), target_logits [M, V], labels/valid/slot [M],
// conf_logits [M] (undefined: no confidence term). L1 is the plain ||q - p||_1 (no 1/2), the
// confidence label is clamp(1 - ||q - p||_1 / 2, 0, 1), detached.
LossParts block_loss(const torch::Tensor& draft_logits, const torch::Tensor& target_logits, const torch::Tensor& labels,
                     const torch::Tensor& valid, const torch::Tensor& slot, const torch::Tensor& conf_logits,
                     const LossWeights& w);

}  // namespace dspark::train
