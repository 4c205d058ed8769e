#include "runtime/spec_generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "runtime/step_profile.h"
#include "spec_decode/prefix_scheduler.h"
#include "spec_decode/verify.h"

namespace dspark {

using json = nlohmann::json;

json SpecMetrics::to_json() const {
  json acc = json::array(), ver = json::array();
  for (size_t i = 0; i < verified_at.size(); ++i) {
    ver.push_back(verified_at[i]);
    acc.push_back(verified_at[i] ? double(accepted_at[i]) / double(verified_at[i]) : 0.0);
  }
  return {{"rounds", rounds},
          {"drafted_tokens", drafted},
          {"proposed_tokens", proposed},
          {"accepted_tokens", accepted},
          {"mean_accepted_length", mean_accepted_length()},
          {"acceptance_rate", drafted ? double(accepted) / double(drafted) : 0.0},
          {"mean_verified_drafts", rounds ? double(drafted) / double(rounds) : 0.0},
          {"acceptance_per_position", acc},
          {"verified_per_position", ver},
          {"draft_seconds", draft_seconds},
          {"verify_seconds", verify_seconds},
          {"other_seconds", other_seconds}};
}

void SpecMetrics::merge(const SpecMetrics& o) {
  rounds += o.rounds;
  drafted += o.drafted;
  proposed += o.proposed;
  accepted += o.accepted;
  if (verified_at.size() < o.verified_at.size()) {
    verified_at.resize(o.verified_at.size());
    accepted_at.resize(o.accepted_at.size());
  }
  for (size_t i = 0; i < o.verified_at.size(); ++i) {
    verified_at[i] += o.verified_at[i];
    accepted_at[i] += o.accepted_at[i];
  }
  round_records.insert(round_records.end(), o.round_records.begin(), o.round_records.end());
  draft_seconds += o.draft_seconds;
  verify_seconds += o.verify_seconds;
  other_seconds += o.other_seconds;
}

std::vector<double> profile_sps_curve(const Model& target, DType kv_dtype, int K, int max_tokens) {
  max_tokens = std::max(max_tokens, K + 1);
  std::vector<std::pair<int, double>> pts;  // (tokens in the step, seconds)
  StepProfileOptions opt;
  opt.contexts = {256};
  opt.kv_dtype = kv_dtype;
  opt.batches = {1};
  opt.tokens.clear();
  for (int t = 1; t <= K + 1; ++t) opt.tokens.push_back(t);
  for (const StepPoint& p : profile_steps(target, opt))
    pts.push_back({p.tokens_per_seq, p.seconds});
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

GenerateResult spec_generate(Forward& fwd, int seq, const Tokenizer& tok,
                             std::span<const int32_t> prompt, const GenerateParams& params,
                             Drafter& drafter, const SpecConfig& spec, VerifyLengthPolicy& policy,
                             SpecMetrics& m, const TextCallback& on_text) {
  params.sampling.validate();
  const int max_tokens = output_budget(fwd, seq, prompt.size(), params);
  const ModelConfig& c = fwd.model().config();
  const int V = c.vocab_size;
  const int K = spec.num_speculative_tokens;
  if (K <= 0 || K > drafter.max_draft_tokens())
    fail("speculation length ", K, " is outside [1, ", drafter.max_draft_tokens(), "]");
  if (m.verified_at.size() < size_t(K)) {
    m.verified_at.resize(size_t(K));
    m.accepted_at.resize(size_t(K));
  }
  GenerateResult res;
  res.prompt_tokens = int(prompt.size());
  // Independent streams: drafting, acceptance tests, residual / bonus / first-token draws.
  Rng draft_rng(params.sampling.seed, 1), accept_rng(params.sampling.seed, 2),
      residual_rng(params.sampling.seed, 3);
  Sampler sampler;
  StopStringFilter stops(params.stop_strings);
  StreamDecoder decoder(tok, /*skip_special_tokens=*/true);
  bool keep_going = true;
  auto emit_text = [&](const std::string& piece) {
    if (piece.empty()) return;
    res.text += piece;
    if (on_text && !on_text(piece)) keep_going = false;
  };

  // Prefill with the drafter's taps on every prompt row.
  double t0 = now_seconds();
  const int dseq = drafter.begin();
  ForwardRequest req;
  req.tap_layers = drafter.target_layers();
  Batch b;
  Buffer<float> probs;
  probs.resize(size_t(V) * size_t(K + 1));
  const float* last_logits = nullptr;
  for (size_t start = 0; start < prompt.size(); start += size_t(params.prefill_chunk)) {
    const size_t end = std::min(prompt.size(), start + size_t(params.prefill_chunk));
    b.clear();
    const bool taps = !req.tap_layers.empty();
    for (size_t i = start; i < end; ++i)
      b.add(prompt[i], int(i), seq, taps || i + 1 == prompt.size());
    req.logits = end == prompt.size();
    req.logits_last = 1;
    const ForwardOutput& out = fwd.run(b, req);
    const TargetFeatures f{out.taps, taps ? out.n_out : 0, out.n_taps * out.hidden};
    drafter.extend(dseq, prompt.subspan(start, end - start), int(start), f);
    if (req.logits) last_logits = out.logits_row(out.n_out - 1);
  }
  sampler.dense(last_logits, V, params.sampling, probs.data());
  int32_t anchor = Sampler::draw_dense(probs.data(), V, residual_rng);
  res.prefill_seconds = now_seconds() - t0;

  const double decode_start = now_seconds();
  res.finish_reason = "length";
  int pos = int(prompt.size());
  Draft draft;
  DraftSampling ds{spec.draft_sample == DraftSampleMethod::Probabilistic, params.sampling,
                   &draft_rng};
  std::vector<int32_t> emitted;
  // Emits one token; returns false when generation must stop.
  auto emit = [&](int32_t token) {
    res.tokens.push_back(token);
    if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), token) !=
        params.stop_token_ids.end()) {
      res.finish_reason = "stop";
      return false;
    }
    emit_text(stops.push(decoder.push(token)));
    if (stops.stopped()) {
      res.finish_reason = "stop";
      return false;
    }
    return keep_going && int(res.tokens.size()) < max_tokens;
  };
  if (max_tokens == 0 || !emit(anchor)) {
    if (!stops.stopped()) emit_text(stops.push(decoder.flush()) + stops.flush());
    res.decode_seconds = now_seconds() - decode_start;
    drafter.end(dseq);
    return res;
  }
  bool done = false;
  while (!done) {
    // 1. Draft.
    double t = now_seconds();
    const int want = std::min(K, max_tokens - int(res.tokens.size()));
    drafter.propose(dseq, anchor, pos, want, ds, draft);
    m.proposed += int64_t(draft.tokens.size());
    const Draft* dp = &draft;
    int l = 0;
    policy.choose(std::span<const Draft* const>(&dp, 1), std::span<int>(&l, 1));
    l = std::clamp(l, 0, int(draft.tokens.size()));
    const double drafting = now_seconds() - t;
    m.draft_seconds += drafting;
    policy.observe_drafting(drafting);

    // 2. One target pass over [anchor, x_1..x_l], with taps for the drafter.
    t = now_seconds();
    b.clear();
    b.add(anchor, pos, seq, true);
    for (int i = 0; i < l; ++i) b.add(draft.tokens[size_t(i)], pos + 1 + i, seq, true);
    req.logits = true;
    req.logits_last = -1;
    const ForwardOutput& out = fwd.run(b, req);
    const std::span<const int32_t> drafts(draft.tokens.data(), size_t(l));
    VerifyResult vr;
    if (params.sampling.greedy()) {
      vr = verify_greedy_logits(drafts, out.logits_row(0), V,
                                V);  // argmax per row; no distributions
    } else {
      for (int i = 0; i <= l; ++i)
        sampler.dense(out.logits_row(i), V, params.sampling, probs.data() + int64_t(i) * V);
      const VerifyInput vin{V, drafts, draft.q.empty() ? nullptr : draft.q.data(), probs.data()};
      vr = verify(spec.rejection, false, vin, VerifyRng{&accept_rng, &residual_rng});
    }
    m.verify_seconds += now_seconds() - t;

    // 3. Commit: the anchor and the accepted drafts keep their KV rows and feed the drafter.
    t = now_seconds();
    ++m.rounds;
    m.drafted += l;
    m.accepted += vr.accepted;
    for (int i = 0; i < l; ++i) {
      ++m.verified_at[size_t(i)];
      if (i < vr.accepted) ++m.accepted_at[size_t(i)];
    }
    if (m.record_rounds && !draft.confidence_logit.empty())
      m.round_records.push_back(RoundRecord{
          std::vector<float>(draft.confidence_logit.begin(), draft.confidence_logit.begin() + l),
          vr.accepted});
    fwd.kv().truncate(seq, pos + vr.accepted + 1);
    for (int i = 0; i < vr.accepted && !done; ++i) done = !emit(draft.tokens[size_t(i)]);
    if (!done) done = !emit(vr.next_token);
    if (!done) {
      emitted.assign(1, anchor);
      emitted.insert(emitted.end(), draft.tokens.begin(), draft.tokens.begin() + vr.accepted);
      const TargetFeatures f{out.taps, req.tap_layers.empty() ? 0 : vr.accepted + 1,
                             out.n_taps * out.hidden};
      drafter.accept(dseq, emitted, pos, f);
      pos += vr.accepted + 1;
      anchor = vr.next_token;
    }
    m.other_seconds += now_seconds() - t;
  }
  if (!stops.stopped()) {
    emit_text(stops.push(decoder.flush()));
    if (!stops.stopped())
      emit_text(stops.flush());
    else
      res.finish_reason = "stop";
  }
  res.decode_seconds = now_seconds() - decode_start;
  drafter.end(dseq);
  return res;
}

}  // namespace dspark
