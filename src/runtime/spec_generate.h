// Speculative generation of one sequence: draft -> choose lengths -> one target pass -> verify
// -> commit, until a stop. The output distribution is exactly the target's.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/generate.h"
#include "spec_decode/calibration.h"
#include "spec_decode/drafter.h"
#include "spec_decode/length_policy.h"
#include "spec_decode/spec_config.h"

namespace dspark {

struct SpecMetrics {
  int64_t rounds = 0;    // verification passes
  int64_t drafted = 0;   // drafted tokens that were verified
  int64_t proposed = 0;  // drafted tokens, verified or cut by the length policy
  int64_t accepted = 0;  // accepted drafts (bonus / correction tokens not included)
  std::vector<int64_t> verified_at, accepted_at;  // per draft position 1..K
  double draft_seconds = 0, verify_seconds = 0, other_seconds = 0;
  // When set, every round's confidence logits and accepted count are kept (for calibration).
  bool record_rounds = false;
  std::vector<RoundRecord> round_records;

  // Tokens emitted per round, counting the bonus: (accepted + rounds) / rounds.
  double mean_accepted_length() const { return rounds ? double(accepted + rounds) / double(rounds) : 0.0; }
  nlohmann::json to_json() const;
  void merge(const SpecMetrics& o);
};

// The verification-length policy a SpecConfig asks for: every draft, a static confidence
// threshold, or the hardware-aware prefix scheduler (Algorithm 1). Its cost curve SPS(B) covers
// steps of B = 1 .. max(K + 1, max_step_tokens) tokens: the config's dspark_sps_curve (at least
// K + 1 entries; past its end the step time is extrapolated) or, when that is "auto", `target`'s
// step time profiled now (about 6 forwards per point: one sequence verifying 1..K+1 tokens, then
// 2, 4, 8, ... sequences of K + 1), interpolated and made monotone, plus the drafting time
// learned while generating.
std::unique_ptr<VerifyLengthPolicy> make_verify_policy(const SpecConfig& spec, const Model& target, DType kv_dtype,
                                                       int max_step_tokens = 0);
// The profiled curve: sps[B] for B = 0 (unused) .. max_tokens.
std::vector<double> profile_sps_curve(const Model& target, DType kv_dtype, int K, int max_tokens);

// Generates like generate(), speculatively. `seq` is the target's KV sequence (empty).
GenerateResult spec_generate(Forward& fwd, int seq, const Tokenizer& tok, std::span<const int32_t> prompt,
                             const GenerateParams& params, Drafter& drafter, const SpecConfig& spec,
                             VerifyLengthPolicy& policy, SpecMetrics& metrics, const TextCallback& on_text = nullptr);

}  // namespace dspark
