#include "runtime/generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "runtime/context_limit.h"
#include "runtime/engine.h"

namespace dspark {

const float* prefill(Forward& fwd, int seq, std::span<const int32_t> prompt, int chunk) {
  if (prompt.empty()) fail("the prompt is empty");
  Batch b;
  ForwardRequest req;
  const float* last = nullptr;
  const int start = fwd.kv().length(seq);
  for (size_t c = 0; c < prompt.size(); c += size_t(chunk)) {
    const size_t e = std::min(prompt.size(), c + size_t(chunk));
    b.clear();
    for (size_t i = c; i < e; ++i)
      b.add(prompt[i], start + int32_t(i), seq, i + 1 == prompt.size());
    req.logits = e == prompt.size();
    const ForwardOutput& out = fwd.run(b, req);
    if (req.logits) last = out.logits_row(0);
  }
  return last;
}

int output_budget(const Forward& fwd, size_t prompt_tokens, const GenerateParams& params) {
  if (params.max_tokens != kAsManyAsFit) check_max_tokens(params.max_tokens);
  const int limit = resolve_max_model_len(fwd.model().config(), params.max_model_len);
  const int64_t room = int64_t(fwd.kv().free_blocks()) * kKvBlock;
  check_prompt_length(int64_t(prompt_tokens), limit, room);
  return generation_budget(int64_t(prompt_tokens), params.max_tokens,
                           int(std::min<int64_t>(limit, room)));
}

GenerateResult generate(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TextCallback& on_text) {
  return run_alone(AloneRun{&fwd, &tok, prompt, params, nullptr, nullptr, nullptr, nullptr, on_text});
}

GenerateResult run_alone(const AloneRun& run) {
  const GenerateParams& params = run.params;
  params.validate();
  GenerateResult res;
  res.prompt_tokens = int(run.prompt.size());
  if (run.prompt.empty()) fail("the prompt is empty");
  GenerateParams p = params;
  p.max_tokens = output_budget(*run.fwd, run.prompt.size(), params);  // at least 1
  res.finish_reason = "length";
  EngineOptions opt;
  opt.max_num_seqs = 1;
  opt.max_model_len = params.max_model_len;
  const SpecConfig spec = run.spec ? *run.spec : SpecConfig{};
  const int K = speculation_length(run.drafter, spec);
  opt.max_num_batched_tokens = std::max(params.prefill_chunk, K + 1);
  Engine e(*run.fwd, *run.tok, opt, run.drafter, spec, run.policy);
  e.collect_spec_metrics(run.metrics);
  const double t0 = now_seconds();
  double first = -1;
  bool stop_asked = false;
  const uint64_t h =
      e.submit(EngineRequest{"", std::vector<int32_t>(run.prompt.begin(), run.prompt.end()), p},
               [&](RequestOutput&& o) {
                 if (first < 0 && !o.token_ids.empty()) first = now_seconds();
                 res.tokens.insert(res.tokens.end(), o.token_ids.begin(), o.token_ids.end());
                 if (!o.text.empty()) {
                   res.text += o.text;
                   if (run.on_text && !run.on_text(o.text) && !o.finished) stop_asked = true;
                 }
                 if (o.finished) res.finish_reason = o.finish_reason;
               });
  while (e.step())
    if (stop_asked) {
      e.abort(h);
      stop_asked = false;
    }
  const double end = now_seconds();
  res.prefill_seconds = (first < 0 ? end : first) - t0;
  res.decode_seconds = first < 0 ? 0 : end - first;
  return res;
}

}  // namespace dspark
