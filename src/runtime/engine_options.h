// The engine's options: the request scheduler's limits, the KV cache and hidden-state export.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/dtype.h"
#include "runtime/request.h"

namespace dspark {

struct EngineOptions {
  int max_num_seqs = 16;              // requests running at once (vLLM --max-num-seqs)
  int max_num_batched_tokens = 2048;  // tokens in one step (vLLM --max-num-batched-tokens)
  int64_t kv_tokens = 0;  // KV cache capacity in positions (0: what the memory default gives)
  int max_model_len = 0;  // 0: the model's max_position_embeddings
  DType kv_dtype = DType::BF16;
  // Steps with prompts to prefill run only those (vLLM V0's order): the lowest TTFT, at the cost
  // of one step's delay to the decoding requests per arrival. Off: chunks of prompts share each
  // step with the decoding rounds (vLLM V1's chunked prefill).
  bool prefill_first = false;
  // Automatic prefix caching (vLLM's): full KV blocks are kept under their tokens and shared by
  // later requests with the same prefix, which prefill only the rest. With a drafter, the
  // drafter's context must be cached too (DSpark, DFlash, n-gram); EAGLE-3 requests prefill all.
  bool enable_prefix_caching = false;
  // Hidden-state export (the hidden-states connector): the outputs of these target layers
  // (dspark's ids: 0-based decoder-layer outputs, -1 the embeddings; vLLM's id i is our i - 1)
  // are kept for every position of a request that asks (EngineRequest::export_hidden), and
  // handed to on_export when it finishes. With a drafter that taps them already (export while
  // speculating) they cost a copy; the others are tapped from the same forward pass.
  std::vector<int> export_layers;
  bool export_bf16 = true;  // the export's dtype: bf16, else f32
  std::function<void(HiddenExport&&)> on_export;  // engine thread; must not block
};

}  // namespace dspark
