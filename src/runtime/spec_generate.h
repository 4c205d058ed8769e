// Speculative generation of one sequence: draft -> choose lengths -> one target pass -> verify
// -> commit, until a stop. The output distribution is exactly the target's.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/metrics.h"
#include "runtime/step_profile.h"
#include "spec_decode/calibration.h"
#include "spec_decode/drafter.h"
#include "spec_decode/spec_config.h"
#include "spec_decode/verify_length.h"

namespace dspark {

// The verification-length policy a SpecConfig asks for: every draft, a static confidence
// threshold, or the hardware-aware prefix length policy (Algorithm 1). Its cost curve SPS(B) covers
// steps of B = 1 .. max(K + 1, max_step_tokens) tokens: the config's dspark_sps_curve (at least
// K + 1 entries; past its end the step time is extrapolated) or, when that is "auto", `target`'s
// step time profiled now (profile_sps_curve). Either way the policy adds the drafting time and
// the plain step's cost beyond the forward, both learned while generating.
std::unique_ptr<VerifyLengthPolicy> make_verify_policy(const SpecConfig& spec, const Model& target,
                                                       DType kv_dtype, int max_step_tokens = 0);
// The profiled curve: sps[B] for B = 0 (unused) .. max_tokens, from sps_curve_from_profile over
// kSpsPasses interleaved passes of one sequence verifying 1..K+1 tokens, then 8 of 2, 4, 8, ...
// sequences of K + 1.
std::vector<double> profile_sps_curve(const Model& target, DType kv_dtype, int K, int max_tokens);
inline constexpr int kSpsPasses = 24;           // timed passes over the single-sequence points
inline constexpr double kSpsSlopeGrid = 1.0 / 64;  // the per-token cost's grid, in units of t(1)
// The curve from profiled points: `single`, one sequence verifying 1..K+1 tokens, fitted with a
// Theil-Sen line through each point's lower quartile and its relative slope rounded to
// kSpsSlopeGrid; `batched` (2, 4, ... sequences of K + 1 tokens), each rounded to a power of
// 2^(1/16) of t(1); interpolated linearly in step time, extrapolated with the last slope and
// made monotone. Rounding is what makes two profiles of one machine give the same lengths.
std::vector<double> sps_curve_from_profile(std::span<const StepPoint> single,
                                           std::span<const StepPoint> batched, int K,
                                           int max_tokens);

// Generates like generate(), speculatively: the engine serving this one request (so every
// figure and every output is the server's). Fills `metrics` with the run's speculative figures.
GenerateResult spec_generate(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                             const GenerateParams& params, Drafter& drafter, const SpecConfig& spec,
                             VerifyLengthPolicy& policy, SpecMetrics& metrics,
                             const TextCallback& on_text = nullptr);

}  // namespace dspark
