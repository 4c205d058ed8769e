// The engine's one length rule (vLLM's max_model_len): a sequence's prompt and generated tokens
// together never take more than max_model_len positions. A prompt that leaves no room is refused
// before any work; generation that reaches the limit ends with finish_reason "length".
#pragma once

#include <cstdint>

#include "model/config.h"

namespace dspark {

// The maximum model length for `cfg`: `requested` when > 0 (it may not exceed the config's
// max_position_embeddings, the positions the model was trained for), else that config value.
// `flag` names the setting in the error (e.g. "--max-model-len").
int resolve_max_model_len(const ModelConfig& cfg, int64_t requested, const char* flag = "--max-model-len");

// Throws Error unless a prompt of `prompt_tokens` leaves room for a generated token under
// `max_model_len`, and (when kv_capacity_tokens > 0) fits in the KV cache. The message gives the
// prompt's length and the limit; the error's param is "prompt", its kind ContextLengthExceeded
// (InvalidRequest for an empty prompt).
void check_prompt_length(int64_t prompt_tokens, int max_model_len, int64_t kv_capacity_tokens = 0);

// How many tokens may be generated after a prompt of `prompt_tokens`: max_tokens (kAsManyAsFit,
// -1: no limit of its own), cut so that prompt + output <= max_model_len.
int generation_budget(int64_t prompt_tokens, int max_tokens, int max_model_len);

}  // namespace dspark
