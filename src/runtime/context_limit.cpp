#include "runtime/context_limit.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/request.h"

namespace dspark {

int resolve_max_model_len(const ModelConfig& cfg, int64_t requested, const char* flag) {
  const int trained = cfg.max_position_embeddings;
  if (requested < 0) fail(flag, " must be >= 0 (0: the config's max_position_embeddings), got ", requested);
  if (requested == 0) {
    if (trained <= 0) fail("config.json has no max_position_embeddings; give ", flag);
    return trained;
  }
  if (trained > 0 && requested > trained)
    fail(flag, " ", requested, " exceeds the model's max_position_embeddings ", trained,
         " (positions beyond it were never trained)");
  return int(requested);
}

void check_prompt_length(int64_t prompt_tokens, int max_model_len, int64_t kv_capacity_tokens) {
  if (prompt_tokens <= 0) fail_request(ErrorKind::InvalidRequest, "prompt", "the prompt is empty");
  if (prompt_tokens >= max_model_len)
    fail_request(ErrorKind::ContextLengthExceeded, "prompt", "the prompt has ", prompt_tokens,
                 " tokens, which leaves no room to generate under the maximum model length of ", max_model_len,
                 " (prompt + output tokens); shorten the prompt");
  if (kv_capacity_tokens > 0 && prompt_tokens + 1 > kv_capacity_tokens)
    fail_request(ErrorKind::ContextLengthExceeded, "prompt", "the prompt has ", prompt_tokens,
                 " tokens but the KV cache holds ", kv_capacity_tokens, " positions");
}

int generation_budget(int64_t prompt_tokens, int max_tokens, int max_model_len) {
  const int64_t room = std::max<int64_t>(int64_t(max_model_len) - prompt_tokens, 0);
  return int(max_tokens == kAsManyAsFit ? room : std::min<int64_t>(room, std::max(max_tokens, 0)));
}

}  // namespace dspark
