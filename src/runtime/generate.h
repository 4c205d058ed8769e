// Single-request generation (the engine serving one request) and the pieces the engine shares:
// the generation parameters, stop strings, the output budget.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/forward.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

struct GenerateParams {
  SamplingParams sampling;
  int max_tokens = 128;
  std::vector<int32_t>
      stop_token_ids;  // generation ends after emitting one (it is not in the text)
  std::vector<std::string> stop_strings;  // generation ends before the first occurrence
  int prefill_chunk = 512;
  // Prompt + output positions at most (vLLM's max_model_len); 0: the config's
  // max_position_embeddings. Generation that reaches it ends with finish_reason "length".
  int max_model_len = 0;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (a final stop token is included)
  std::string text;             // decoded completion, cut before any stop string
  int prompt_tokens = 0;
  std::string finish_reason;  // "stop" or "length"
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Called with each newly final piece of text; return false to stop early.
using TextCallback = std::function<bool(const std::string& piece)>;

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

// How many tokens generate() / spec_generate() may produce for `prompt` in a new sequence of
// fwd's cache: max_tokens cut by the maximum model length and the free KV room. Throws Error
// (giving the prompt's length and the limit) when the prompt leaves no room, before any work.
int output_budget(const Forward& fwd, size_t prompt_tokens, const GenerateParams& params);

// Generates a completion of `prompt` in a new sequence of fwd's cache (freed at the end): the
// engine serving this one request, so the tokens are the ones the server gives it.
GenerateResult generate(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TextCallback& on_text = nullptr);

// Prefills prompt[0 .. n-1] in chunks; returns the logits row of the last prompt token
// (valid until the next forward run).
const float* prefill(Forward& fwd, int seq, std::span<const int32_t> prompt, int chunk);

}  // namespace dspark
