// Hidden-state layer ids: vLLM's convention and dspark's, translated here and nowhere else.
//   vLLM (the connector, the store's manifests, eagle_aux_hidden_state_layer_ids): id i is the
//     residual stream entering decoder layer i; 0 is the embeddings, L = num_hidden_layers the
//     last layer's output before the final norm.
//   dspark (Forward taps, drafter configs): 0-based decoder-layer outputs, -1 the embeddings.
#pragma once

#include <vector>

#include "core/error.h"

namespace dspark::connector {

inline int dspark_layer_from_vllm(int vllm_id, int num_layers) {
  if (vllm_id < 0 || vllm_id > num_layers)
    fail("hidden-state layer id ", vllm_id, " is outside 0 (the embeddings) .. ", num_layers,
         " (the last layer's output) of this target");
  return vllm_id - 1;
}
inline int vllm_layer_from_dspark(int id) {
  return id + 1;
}

inline std::vector<int> dspark_layers_from_vllm(const std::vector<int>& ids, int num_layers) {
  std::vector<int> out;
  for (int i : ids) out.push_back(dspark_layer_from_vllm(i, num_layers));
  return out;
}
inline std::vector<int> vllm_layers_from_dspark(const std::vector<int>& ids) {
  std::vector<int> out;
  for (int i : ids) out.push_back(vllm_layer_from_dspark(i));
  return out;
}

}  // namespace dspark::connector
