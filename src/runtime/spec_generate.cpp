#include "runtime/spec_generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "runtime/step_profile.h"
#include "spec_decode/prefix_scheduler.h"
#include "spec_decode/verify.h"

namespace dspark {

using json = nlohmann::json;

std::vector<double> profile_sps_curve(const Model& target, DType kv_dtype, int K, int max_tokens) {
  max_tokens = std::max(max_tokens, K + 1);
  std::vector<std::pair<int, double>> pts;  // (tokens in the step, seconds)
  StepProfileOptions opt;
  opt.contexts = {256};
  opt.kv_dtype = kv_dtype;
  opt.batches = {1};
  opt.tokens.clear();
  for (int t = 1; t <= K + 1; ++t) opt.tokens.push_back(t);
  {
    // One sequence's steps of 1..K+1 tokens, replaced by their least-squares line t = a + b B
    // (b >= 0): kernel tile edges and timer noise make the raw points jump by a few percent, and
    // a local dip would stop Algorithm 1's scan early (and differently from run to run).
    double n = 0, sb = 0, st = 0, sbb = 0, sbt = 0;
    for (const StepPoint& p : profile_steps(target, opt)) {
      const double b = p.tokens_per_seq, t = p.seconds;
      n += 1, sb += b, st += t, sbb += b * b, sbt += b * t;
    }
    const double den = n * sbb - sb * sb;
    const double slope = den > 0 ? std::max(0.0, (n * sbt - sb * st) / den) : 0.0;
    const double icpt = (st - slope * sb) / n;
    for (int t = 1; t <= K + 1; ++t) pts.push_back({t, std::max(icpt + slope * t, 1e-9)});
  }
  opt.batches.clear();
  for (int b = 2; b * (K + 1) <= std::min(max_tokens, 512); b *= 2) opt.batches.push_back(b);
  if (!opt.batches.empty()) {
    opt.tokens = {K + 1};
    for (const StepPoint& p : profile_steps(target, opt))
      pts.push_back({p.batch * p.tokens_per_seq, p.seconds});
  }
  std::sort(pts.begin(), pts.end());
  std::vector<double> sps{0.0};
  double slowest = 0;
  size_t j = 0;
  for (int B = 1; B <= max_tokens; ++B) {
    while (j + 1 < pts.size() && pts[j + 1].first <= B) ++j;
    double t = pts[j].second;
    if (j + 1 < pts.size() && B > pts[j].first) {  // linear between measured points
      const double f = double(B - pts[j].first) / double(pts[j + 1].first - pts[j].first);
      t = pts[j].second + f * (pts[j + 1].second - pts[j].second);
    } else if (B > pts[j].first && j > 0) {  // past the last point: its slope
      const double slope =
          (pts[j].second - pts[j - 1].second) / double(pts[j].first - pts[j - 1].first);
      t = pts[j].second + std::max(0.0, slope) * double(B - pts[j].first);
    }
    slowest = std::max(slowest, t);  // a longer step is never cheaper (vLLM: maximum.accumulate)
    sps.push_back(1.0 / slowest);
  }
  return sps;
}

std::unique_ptr<VerifyLengthPolicy> make_verify_policy(const SpecConfig& spec, const Model& target,
                                                       DType kv_dtype, int max_step_tokens) {
  if (spec.confidence_threshold > 0)
    return std::make_unique<StaticThresholdPolicy>(spec.confidence_threshold);
  if (!spec.adaptive_verification) return std::make_unique<FullBlockPolicy>();
  const int K = spec.num_speculative_tokens;
  if (K <= 0) fail("adaptive verification: the speculation length is not set");
  if (!spec.sps_curve.empty()) {
    if (spec.sps_curve.size() < size_t(K) + 1)
      fail("speculative config: field 'dspark_sps_curve' has ", spec.sps_curve.size(),
           " entries but needs at least ", K + 1,
           ": steps per second of a target step of 1, 2, ... tokens, up to K + 1 = ", K + 1,
           " (num_speculative_tokens ", K, " + 1)");
    std::vector<double> sps{0.0};
    sps.insert(sps.end(), spec.sps_curve.begin(), spec.sps_curve.end());
    return std::make_unique<PrefixScheduler>(std::move(sps));
  }
  auto s =
      std::make_unique<PrefixScheduler>(profile_sps_curve(target, kv_dtype, K, max_step_tokens));
  s->learn_drafting_cost(true);
  return s;
}

GenerateResult spec_generate(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                             const GenerateParams& params, Drafter& drafter, const SpecConfig& spec,
                             VerifyLengthPolicy& policy, SpecMetrics& metrics,
                             const TextCallback& on_text) {
  if (spec.num_speculative_tokens <= 0 || spec.num_speculative_tokens > drafter.max_draft_tokens())
    fail("speculation length ", spec.num_speculative_tokens, " is outside [1, ",
         drafter.max_draft_tokens(), "]");
  return run_alone(fwd, tok, prompt, params, &drafter, &spec, &policy, &metrics, on_text);
}

}  // namespace dspark
