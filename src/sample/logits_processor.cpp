#include "sample/logits_processor.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace dspark {

void LogitsParams::validate(int vocab) const {
  constexpr ErrorKind kInvalid = ErrorKind::InvalidRequest;
  if (!(presence_penalty >= -2.f && presence_penalty <= 2.f))
    fail_request(kInvalid, "presence_penalty", "presence_penalty must be in [-2, 2], got ", presence_penalty);
  if (!(frequency_penalty >= -2.f && frequency_penalty <= 2.f))
    fail_request(kInvalid, "frequency_penalty", "frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  if (!(repetition_penalty > 0.f && repetition_penalty <= 100.f))
    fail_request(kInvalid, "repetition_penalty", "repetition_penalty must be in (0, 100] (1 is off), got ",
                 repetition_penalty);
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= vocab)
      fail_request(kInvalid, "logit_bias", "logit_bias: token ", id, " is outside the vocabulary [0, ", vocab, ")");
    if (!(bias >= -100.f && bias <= 100.f))
      fail_request(kInvalid, "logit_bias", "logit_bias: the bias of token ", id, " must be in [-100, 100], got ",
                   bias);
  }
}

LogitsProcessor::LogitsProcessor(const LogitsParams& p, std::span<const int32_t> prompt, int vocab)
    : p_(p), vocab_(vocab), count_(size_t(vocab), 0) {
  if (p_.repetition_penalty != 1.f) {
    in_prompt_.assign(size_t(vocab), 0);
    for (int32_t t : prompt)
      if (t >= 0 && t < vocab && !in_prompt_[size_t(t)]) {
        in_prompt_[size_t(t)] = 1;
        prompt_only_.push_back(t);
      }
  }
}

void LogitsProcessor::push(int32_t token) {
  if (token < 0 || token >= vocab_) fail("logits processor: token ", token, " outside the vocabulary of ", vocab_);
  history_.push_back(token);
  if (count_[size_t(token)]++ == 0) distinct_.push_back(token);
}

void LogitsProcessor::pop_to(size_t n) {
  while (history_.size() > n) {
    const int32_t t = history_.back();
    history_.pop_back();
    // Pushes and pops nest, so a token whose count drops to 0 is the last one first pushed.
    if (--count_[size_t(t)] == 0) distinct_.pop_back();
  }
}

namespace {
float repeat_penalised(float l, float rp) { return l > 0.f ? l / rp : l * rp; }
}  // namespace

void LogitsProcessor::apply(float* logits) const {
  for (const auto& [id, bias] : p_.logit_bias) logits[id] += bias;
  const float rp = p_.repetition_penalty;
  if (rp != 1.f) {
    for (int32_t t : prompt_only_) logits[t] = repeat_penalised(logits[t], rp);
    for (int32_t t : distinct_)
      if (!in_prompt_[size_t(t)]) logits[t] = repeat_penalised(logits[t], rp);
  }
  if (p_.frequency_penalty != 0.f || p_.presence_penalty != 0.f)
    for (int32_t t : distinct_)
      logits[t] -= p_.frequency_penalty * float(count_[size_t(t)]) + p_.presence_penalty;
}

namespace testing {
namespace {
bool g_ignore_drafts = false;
}
void set_processor_ignores_drafts(bool on) { g_ignore_drafts = on; }
bool processor_ignores_drafts() { return g_ignore_drafts; }
}  // namespace testing

}  // namespace dspark
