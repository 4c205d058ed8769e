#include "runtime/generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "runtime/context_limit.h"
#include "runtime/engine.h"

namespace dspark {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const auto& s : stops_) {
    if (s.empty()) fail("stop strings must not be empty");
    hold_ = std::max(hold_, s.size() - 1);
  }
}

std::string StopStringFilter::push(const std::string& piece) {
  if (stopped_) return "";
  pending_ += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t at = pending_.find(s);
    if (at < cut) {
      cut = at;
      matched_ = s;
    }
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  if (pending_.size() <= hold_) return "";
  // Keep the last hold_ bytes, but never split a UTF-8 character.
  size_t emit = pending_.size() - hold_;
  while (emit > 0 && (uint8_t(pending_[emit]) & 0xC0) == 0x80) --emit;
  std::string out = pending_.substr(0, emit);
  pending_.erase(0, emit);
  return out;
}

std::string StopStringFilter::flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? "" : out;
}

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
  if (params.max_tokens < 0) fail("max_tokens must be >= 0, got ", params.max_tokens);
  const int limit = resolve_max_model_len(fwd.model().config(), params.max_model_len);
  const int64_t room = int64_t(fwd.kv().free_blocks()) * kKvBlock;
  check_prompt_length(int64_t(prompt_tokens), limit, room);
  return generation_budget(int64_t(prompt_tokens), params.max_tokens,
                           int(std::min<int64_t>(limit, room)));
}

GenerateResult generate(Forward& fwd, const Tokenizer& tok, std::span<const int32_t> prompt,
                        const GenerateParams& params, const TextCallback& on_text) {
  return run_alone(fwd, tok, prompt, params, nullptr, nullptr, nullptr, nullptr, on_text);
}

}  // namespace dspark
