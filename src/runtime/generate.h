// Single-request generation: the engine serving one request (run_alone), for `dspark generate`,
// bench spec and calibration. The request's parameters are runtime/request.h.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/forward.h"
#include "runtime/request.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

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

// How many tokens generate() / spec_generate() may produce for `prompt` in a new sequence of
// fwd's cache: max_tokens (at least 1, or kAsManyAsFit) cut by the maximum model length and the
// free KV room. Throws Error for a max_tokens below 1 (check_max_tokens), or (giving the prompt's
// length and the limit) when the prompt leaves no room, before any work.
int output_budget(const Forward& fwd, size_t prompt_tokens, const GenerateParams& params);

// Generates a completion of `prompt` in a new sequence of fwd's cache (freed at the end): the
// engine serving this one request, so the tokens are the ones the server gives it.
GenerateResult generate(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TextCallback& on_text = nullptr);

struct SpecConfig;
struct SpecMetrics;
class Drafter;
class VerifyLengthPolicy;

// One request served alone on `fwd`: max_tokens is cut to what fits (finish_reason "length")
// instead of refused; on_text returning false aborts it. With a drafter, speculatively: `spec`
// gives the method and length, `policy` the verification lengths (null: every draft), and
// `metrics` (optional) gets the run's speculative figures.
struct AloneRun {
  Forward* fwd = nullptr;
  const Tokenizer* tok = nullptr;
  std::span<const int32_t> prompt;
  GenerateParams params;
  Drafter* drafter = nullptr;
  const SpecConfig* spec = nullptr;
  VerifyLengthPolicy* policy = nullptr;
  SpecMetrics* metrics = nullptr;
  TextCallback on_text;
};
GenerateResult run_alone(const AloneRun& run);

// Prefills prompt[0 .. n-1] in chunks; returns the logits row of the last prompt token
// (valid until the next forward run).
const float* prefill(Forward& fwd, int seq, std::span<const int32_t> prompt, int chunk);

}  // namespace dspark
