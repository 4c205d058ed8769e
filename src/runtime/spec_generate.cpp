#include "runtime/spec_generate.h"

#include <algorithm>
#include <cmath>

#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/gemm.h"
#include "runtime/step_profile.h"
#include "spec_decode/verify.h"
#include "spec_decode/verify_length_prefix.h"

namespace dspark {

using json = nlohmann::json;

namespace {

// The lower quartile of a point's samples: load from other processes only ever adds time, so the
// low end of the samples is what repeats from run to run (the median moves with the load).
double low_quartile(std::vector<double> v) {
  if (v.empty()) fail("step profile: a point without samples");
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 4];
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<double> sps_curve_from_profile(std::span<const StepPoint> single,
                                           std::span<const StepPoint> batched, int K,
                                           int max_tokens) {
  max_tokens = std::max(max_tokens, K + 1);
  if (single.size() < 2) fail("SPS curve: needs at least two single-sequence points");
  // 1. One sequence verifying 1..K+1 tokens: a Theil-Sen line t = a + b (B - 1) through the
  //    points' lower quartiles (the median of the pairwise slopes, b >= 0; then the median
  //    intercept). Kernel tile edges and timer noise make single points jump by a few percent,
  //    a local dip would stop Algorithm 1's scan early, and one bad point moves a least-squares
  //    line but not this one.
  std::vector<std::pair<double, double>> xy;  // (B - 1, seconds)
  for (const StepPoint& p : single)
    xy.push_back({double(p.batch * p.tokens_per_seq - 1), low_quartile(p.samples)});
  std::vector<double> slopes, icpts;
  for (size_t i = 0; i < xy.size(); ++i)
    for (size_t j = i + 1; j < xy.size(); ++j)
      if (xy[j].first != xy[i].first)
        slopes.push_back((xy[j].second - xy[i].second) / (xy[j].first - xy[i].first));
  const double b = slopes.empty() ? 0.0 : std::max(0.0, median_of(slopes));
  for (const auto& [x, t] : xy) icpts.push_back(t - b * x);
  const double a = std::max(median_of(icpts), 1e-9);
  // 2. Rounded, so that two profiles of one machine give one curve: Algorithm 1 compares only
  //    ratios of step times, so the curve is kept as t(1) times a relative cost, and that is
  //    rounded: the per-token slope b / a to a multiple of kSlopeGrid, batched steps' t / t(1) to
  //    a power of 2^(1/16) (4.4% apart). t(1) itself is kept (only the drafting cost is compared
  //    with it, on its own grid of t(1)).
  const double rho = std::round(b / a / kSpsSlopeGrid) * kSpsSlopeGrid;
  std::vector<std::pair<int, double>> pts;  // (tokens in the step, seconds)
  for (int t = 1; t <= K + 1; ++t) pts.push_back({t, a * (1.0 + rho * double(t - 1))});
  for (const StepPoint& p : batched) {
    const double r = low_quartile(p.samples) / a;
    pts.push_back({p.batch * p.tokens_per_seq, a * std::exp2(std::round(16 * std::log2(r)) / 16)});
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

std::vector<double> profile_sps_curve(const Model& target, DType kv_dtype, int K, int max_tokens) {
  max_tokens = std::max(max_tokens, K + 1);
  StepProfileOptions opt;
  opt.contexts = {256};
  opt.kv_dtype = kv_dtype;
  opt.batches = {1};
  opt.tokens.clear();
  for (int t = 1; t <= K + 1; ++t) opt.tokens.push_back(t);
  // Every point once per pass, kSpsPasses passes: a burst of other load hits one sample of each
  // point, not all samples of one (about (K + 1) x 24 forwards, a fraction of a second here).
  opt.reps = kSpsPasses;
  opt.interleave = true;
  const std::vector<StepPoint> single = profile_steps(target, opt);
  std::vector<StepPoint> batched;
  opt.batches.clear();
  for (int b = 2; b * (K + 1) <= std::min(max_tokens, 512); b *= 2) opt.batches.push_back(b);
  if (!opt.batches.empty()) {
    opt.tokens = {K + 1};
    opt.reps = 8;
    batched = profile_steps(target, opt);
  }
  return sps_curve_from_profile(single, batched, K, max_tokens);
}

// A curve file describes the machine and settings it was measured with; the policy's lengths
// are only right where those hold, so a file from another CPU, kernel backend, thread count or
// dtype is refused (issue 20: never a curve from another machine).
static void check_sps_curve_origin(const SpecConfig::SpsCurveOrigin& o, DType dtype) {
  if (o.file.empty()) return;
  auto refuse = [&](const char* field, const std::string& file_value, const std::string& here) {
    fail(o.file, ": field '", field, "' is '", file_value, "' but this run has '", here,
         "': the SPS curve was measured on another machine or with other settings; write this "
         "machine's with dspark bench step --sps-out (same --threads, --dtype and DSPARK_GEMM), or "
         "use \"dspark_sps_curve\": \"auto\"");
  };
  const std::string cpu = cpu_features().describe();
  if (!o.cpu.empty() && o.cpu != cpu) refuse("cpu", o.cpu, cpu);
  const std::string gemm = gemm_backend_name(gemm_backend());
  if (!o.gemm.empty() && o.gemm != gemm) refuse("gemm", o.gemm, gemm);
  if (!o.dtype.empty() && o.dtype != dtype_name(dtype)) refuse("dtype", o.dtype, dtype_name(dtype));
  if (o.threads > 0 && o.threads != num_threads())
    refuse("threads", std::to_string(o.threads), std::to_string(num_threads()));
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
    check_sps_curve_origin(spec.sps_curve_origin, kv_dtype);
    std::vector<double> sps{0.0};
    sps.insert(sps.end(), spec.sps_curve.begin(), spec.sps_curve.end());
    auto s = std::make_unique<PrefixLengthPolicy>(std::move(sps));
    s->learn_drafting_cost(true);  // the curve as given, the drafting cost as measured here
    return s;
  }
  auto s =
      std::make_unique<PrefixLengthPolicy>(profile_sps_curve(target, kv_dtype, K, max_step_tokens));
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
  return run_alone(AloneRun{&fwd, &tok, prompt, params, &drafter, &spec, &policy, &metrics, on_text});
}

}  // namespace dspark
