// The one place where a sample of the hidden-states store (connector/hidden_states_store.h, vLLM's
// layer convention) becomes a training sample (datagen/hidden_dataset.h, dspark's convention).
//   store:    hidden_states [T, n, H]; layer id i is the residual stream ENTERING decoder layer i
//             (id 0: the embeddings), id L (the target's depth) the last layer's output BEFORE the
//             final norm; token_ids = prompt ids ++ generated ids except the last.
//   training: hidden_states [T, taps + 1, H] f32; slots 0..taps-1 the drafter's tapped layers as
//             0-based layer outputs (dspark id = vLLM id - 1, -1: the embeddings), in the
//             drafter's order; slot taps the FINAL-NORMED state (RMSNorm of the L slot with the
//             target's model.norm.weight); loss_mask 1 on the generated positions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "connector/hidden_states_store.h"
#include "core/error.h"
#include "datagen/hidden_dataset.h"

namespace dspark::train {

// A sample the trainer refuses and asks for again (its token ids are not the response's): the
// message names the handle.
class CorruptSample : public Error {
 public:
  using Error::Error;
};

// What the conversion needs of the target.
struct TargetNorm {
  int num_layers = 0;         // L, the target's decoder layers
  int hidden = 0;             // hidden_size
  float eps = 1e-6f;          // rms_norm_eps
  std::vector<float> weight;  // model.norm.weight [hidden]
};

// The store layer ids (vLLM's convention) a drafter tapping the 0-based target layers
// `drafter_layers` needs: each id + 1, in order, then L.
std::vector<int> store_layer_ids(const std::vector<int>& drafter_layers, int num_layers);

// Converts store sample `s` of a response with prompt ids `prompt_ids` and generated ids
// `generated_ids` into a training sample for a drafter tapping `drafter_layers`. Throws
// CorruptSample when s.token_ids is not prompt_ids ++ generated_ids[:-1] (or its bytes do not hold
// [T, n, H]), and Error, naming the handle and both lists, when the sample lacks a layer the
// drafter needs or has another hidden size (a server exporting other layers: not retried).
datagen::HiddenDataset::Sample to_train_sample(const connector::HiddenSample& s,
                                               const std::vector<int32_t>& prompt_ids,
                                               const std::vector<int32_t>& generated_ids,
                                               const std::vector<int>& drafter_layers,
                                               const TargetNorm& norm);

}  // namespace dspark::train
