// Speculative generation of one sequence: draft -> choose lengths -> one target pass -> verify
// -> commit, until a stop. The output distribution is exactly the target's.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/metrics.h"
#include "spec_decode/calibration.h"
#include "spec_decode/drafter.h"
#include "spec_decode/length_policy.h"
#include "spec_decode/spec_config.h"

namespace dspark {

// The verification-length policy a SpecConfig asks for: every draft, a static confidence
// threshold, or the hardware-aware prefix scheduler (Algorithm 1). Its cost curve SPS(B) covers
// steps of B = 1 .. max(K + 1, max_step_tokens) tokens: the config's dspark_sps_curve (at least
// K + 1 entries; past its end the step time is extrapolated) or, when that is "auto", `target`'s
// step time profiled now (about 6 forwards per point: one sequence verifying 1..K+1 tokens, then
// 2, 4, 8, ... sequences of K + 1), interpolated and made monotone, plus the drafting time
// learned while generating.
std::unique_ptr<VerifyLengthPolicy> make_verify_policy(const SpecConfig& spec, const Model& target,
                                                       DType kv_dtype, int max_step_tokens = 0);
// The profiled curve: sps[B] for B = 0 (unused) .. max_tokens.
std::vector<double> profile_sps_curve(const Model& target, DType kv_dtype, int K, int max_tokens);

// Generates like generate(), speculatively: the engine serving this one request (so every
// figure and every output is the server's). Fills `metrics` with the run's speculative figures.
GenerateResult spec_generate(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                             const GenerateParams& params, Drafter& drafter, const SpecConfig& spec,
                             VerifyLengthPolicy& policy, SpecMetrics& metrics,
                             const TextCallback& on_text = nullptr);

}  // namespace dspark
