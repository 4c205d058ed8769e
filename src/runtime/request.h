// What a request is, for everyone who hands one to the engine (the server, generate, bench): its
// parameters, what it produces after each step, and the hidden states it may export. The
// engine's own per-request state is runtime/request_state.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/logprobs.h"
#include "sample/logits_processor.h"
#include "sample/sampler.h"

namespace dspark {

// max_tokens of a request that gives none: as many tokens as fit under max_model_len (vLLM's
// default).
constexpr int kAsManyAsFit = -1;
constexpr size_t kMaxStopStrings = 64;

struct GenerateParams {
  SamplingParams sampling;
  // response_format's grammar, logit_bias and the penalties, applied before `sampling`
  // (LogitsProcessor).
  LogitsParams logits_params;
  // At least 1, or kAsManyAsFit; 0 only with prompt_logprobs (the prompt is scored, nothing is
  // generated: the request finishes with "length" and no tokens).
  int max_tokens = 128;
  std::vector<int32_t>
      stop_token_ids;  // generation ends after emitting one (it is not in the text)
  std::vector<std::string> stop_strings;  // generation ends before the first occurrence
  int prefill_chunk = 512;
  // Prompt + output positions at most (vLLM's max_model_len); 0: the config's
  // max_position_embeddings. Generation that reaches it ends with finish_reason "length".
  int max_model_len = 0;
  // Log-probabilities (-1: none; else 0 .. kMaxLogprobs top entries per token): `logprobs` for each
  // generated token (RequestOutput::logprobs), `prompt_logprobs` for each prompt token but the
  // first (RequestOutput::prompt_logprobs). Both are the raw logits' log-softmax.
  int logprobs = -1;
  int prompt_logprobs = -1;

  // The one rule for each request field held here, shared by the server (which checks before it
  // tokenizes the prompt), generate, bench spec, calibrate and Engine::submit: the sampling
  // fields (SamplingParams::validate), max_tokens (check_max_tokens, unless kAsManyAsFit or 0 with
  // prompt_logprobs), logprobs and prompt_logprobs (check_logprobs) and the stop strings
  // (check_stop_strings). Throws Error naming the field (its param). logits_params needs the
  // vocabulary: LogitsParams::validate, which Engine::submit runs too.
  void validate() const;
};

// max_tokens as a request gives it: at least 1 (vLLM's rule). `field` is its name in the error
// (a chat's max_completion_tokens).
void check_max_tokens(int64_t max_tokens, const std::string& field = "max_tokens");
// A logprobs count: -1 (none) or 0 .. kMaxLogprobs; `field` names it.
void check_logprobs(int64_t n, const std::string& field);
// At most kMaxStopStrings, none empty.
void check_stop_strings(const std::vector<std::string>& stops);
// Token ids (a prompt's, stop_token_ids) within the vocabulary [0, vocab); `field` names them.
void check_token_ids(std::span<const int32_t> ids, int vocab, const std::string& field);

// Holds back streamed text that might be the start of a stop string, and finds stops.
class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  // Adds text; returns the part that is now safe to emit. Sets stopped() on a match.
  std::string push(const std::string& piece);
  std::string flush();  // the held-back tail (when generation ends without a stop)
  bool stopped() const { return stopped_; }
  // The stop string that matched (the earliest in the text; empty before a match).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string matched_;
  size_t hold_ = 0;
  std::string pending_;
  bool stopped_ = false;
};

struct EngineRequest {
  EngineRequest() = default;
  EngineRequest(std::string id, std::vector<int32_t> prompt_ids, GenerateParams p)
      : request_id(std::move(id)), prompt(std::move(prompt_ids)), params(std::move(p)) {}
  std::string request_id;       // the client's x-request-id, or one the server made
  std::vector<int32_t> prompt;  // token ids (chat template already applied)
  // Sampling (with seed), stop ids and stop strings; max_tokens -1 means as many as fit under
  // max_model_len (vLLM's default), else prompt + max_tokens must fit (submit() refuses it).
  GenerateParams params;
  // Export this request's target hidden states when it finishes (needs EngineOptions::
  // export_layers): every prompt position, and the output's too (all but the last token, which
  // no forward pass has seen) with export_output_tokens (vLLM's include_output_tokens).
  bool export_hidden = false;
  bool export_output_tokens = false;
  std::string export_handle;
};

// What the engine hands a request's owner after each step that advanced it (engine thread).
struct RequestOutput {
  std::string text;  // new text since the previous output (held back near stop strings)
  std::vector<int32_t> token_ids;  // new token ids since the previous output
  // With GenerateParams::logprobs: one entry per token of token_ids, in order (all of them, stop
  // tokens and the tokens of a stop string included, as token_ids).
  Logprobs logprobs;
  // With GenerateParams::prompt_logprobs: prompt tokens 1 .. n-1 (the first has none), once, in the
  // output of the first token (or the finishing one when max_tokens is 0).
  Logprobs prompt_logprobs;
  bool finished = false;
  std::string finish_reason;  // when finished: "stop", "length" or "abort"
  // What stopped a "stop" (vLLM's stop_reason): a stop string, or a stop token that is not one of
  // the model's end-of-sequence ids (-1: neither, as for the end of sequence).
  std::string stop_string;
  int32_t stop_token = -1;
  std::string error;      // why an "abort" the client did not ask for happened (shutdown, failure)
  int prompt_tokens = 0;  // totals so far
  int completion_tokens = 0;
  int cached_tokens = 0;  // prompt tokens the prefix cache held when the request was admitted
};
// Called on the engine thread; must not block (push to a queue and return).
using OutputFn = std::function<void(RequestOutput&&)>;

// What the engine hands the connector for a finished request that asked for export.
struct HiddenExport {
  std::string handle;              // EngineRequest::export_handle
  std::string request_id;
  std::vector<int32_t> token_ids;  // the prompt, and with export_output_tokens the output but the last
  int prompt_tokens = 0;
  int output_tokens = 0;
  std::vector<int> layers;         // EngineOptions::export_layers
  int hidden = 0;
  bool bf16 = true;
  std::string bytes;               // [token_ids.size()][layers.size()][hidden], little-endian
  std::string error;               // non-empty: capture failed (write an error manifest)
};

}  // namespace dspark
