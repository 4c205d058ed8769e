// Response regeneration: the target answers each prompt by sampling, many prompts at once.
//
// Continuous batching: up to `batch` prompts are live, each in its own KV sequence. A prompt
// (or the next user turn of a multi-turn prompt) is prefilled in a forward pass of its own;
// then one forward per step carries one token of every live sequence, and a finished
// sequence's slot is refilled with the next prompt at once.
//
// Deterministic and independent of `batch`: prompt p samples with Rng(seed, p.id); prefills
// hold one sequence only, and a decode row's logits do not depend on the other rows (f32
// weights: the kernels are batch-invariant by design; bf16 weights on the AVX2 backend: every
// decode pass has between 2 and 16 rows, padded with a dummy row when only one sequence is
// live, for which the dot kernel sums each output in the same order). Records are written in
// prompt order, so an interrupted run that is resumed writes exactly the uninterrupted file.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datagen/prompts.h"
#include "model/model.h"
#include "sample/logits_processor.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace dspark::datagen {

struct RegenOptions {
  SamplingParams sampling{0.7f, 20, 0.8f, 0.f, 0};  // DeepSpec's Qwen3 settings; seed = sampling.seed
  // The request processing every response samples under (logits_processor.h): a response_format
  // grammar, so that a drafter can be trained on the target's constrained answers; each assistant
  // turn starts the grammar afresh. Default: none.
  LogitsParams logits;
  int max_tokens = 384;   // per assistant turn
  int batch = 16;         // live sequences at most
  int64_t limit = -1;     // prompts in total (the first `limit` of the source); -1: all
  int prefill_chunk = 512;
  bool progress = true;   // progress bar on stderr
  // Settings that decide the output (model, source, sampling). They are kept in OUT.meta.json;
  // resuming with different ones is an error naming the setting. Empty: no check.
  nlohmann::json settings;
  std::function<void(const std::string&)> log;  // warnings and the summary (default: stderr)
  // Optional: sees every logits row a prompt samples from, in order (tests, analysis).
  std::function<void(int64_t id, const float* logits, int vocab)> on_logits;
};

struct RegenStats {
  int64_t prompts = 0;       // prompts in range (after --limit)
  int64_t already_done = 0;  // found in the output and skipped
  int64_t generated = 0;     // records written by this run
  int64_t response_tokens = 0;
  int64_t forwards = 0;
  bool dropped_partial_line = false;
  double seconds = 0;
};

// Token ids that end a response: the chat format's (<|im_end|>, <|endoftext|> / <|eot_id|>, ...)
// and the model's eos_token_ids.
std::vector<int32_t> regen_stop_tokens(const Tokenizer& tok, const ModelConfig& cfg);

// The prompt tokens of each turn of `p`: [0] the chat-templated first user turn with the
// generation prompt; [k > 0] what follows the assistant's end-of-turn token of turn k-1 up to
// the generation prompt of turn k. `end_of_turn` receives the token that must end turn k-1 for
// the conversation to go on (-1 when the template's spelling is not a single stop token).
std::vector<std::vector<int32_t>> regen_turn_tokens(const Tokenizer& tok, ChatFormat fmt, const RegenPrompt& p,
                                                    int32_t* end_of_turn);

// Answers prompts[i] for every prompt with id < limit that `out_path` does not hold yet and
// appends the records (regen_file.h) in prompt order. A partial last line left by a crash is
// cut off with a warning. The engine's length rule (runtime/context_limit.h) holds, with the
// model's max_position_embeddings as the maximum model length: a prompt whose templated first
// turn leaves no room is an Error naming it (before any work); a record never has more tokens
// than the limit (a response reaching it, or a next turn that does not fit, ends with "length").
RegenStats regenerate(const Model& model, const Tokenizer& tok, const std::vector<RegenPrompt>& prompts,
                      const std::string& out_path, const RegenOptions& opt);

}  // namespace dspark::datagen
