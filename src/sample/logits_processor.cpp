#include "sample/logits_processor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

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

std::shared_ptr<const JsonGrammar> response_format_grammar(const nlohmann::json& rf) {
  constexpr ErrorKind kInvalid = ErrorKind::InvalidRequest;
  if (rf.is_null()) return nullptr;
  if (!rf.is_object()) fail_request(kInvalid, "response_format", "'response_format' must be an object");
  const auto type = rf.find("type");
  if (type == rf.end() || !type->is_string())
    fail_request(kInvalid, "response_format.type", "'response_format.type' must be a string");
  const std::string t = type->get<std::string>();
  if (t == "text") return nullptr;
  if (t == "json_object") return JsonGrammar::any_object();
  if (t != "json_schema")
    fail_request(kInvalid, "response_format.type",
                 "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"", t, "\"");
  const auto js = rf.find("json_schema");
  if (js == rf.end() || !js->is_object())
    fail_request(kInvalid, "response_format.json_schema", "'response_format.json_schema' must be an object");
  const auto schema = js->find("schema");
  if (schema == js->end() || !schema->is_object())
    fail_request(kInvalid, "response_format.json_schema.schema",
                 "'response_format.json_schema.schema' must be an object");
  try {
    return JsonGrammar::from_schema(*schema);
  } catch (const Error& e) {
    fail_request(kInvalid, "response_format.json_schema.schema", e.what());
  }
}

LogitsProcessor::LogitsProcessor(const LogitsParams& p, std::span<const int32_t> prompt, int vocab)
    : p_(p), vocab_(vocab) {
  // Occurrences matter to the penalties only (a grammar or a bias alone counts nothing).
  if (p_.penalties()) count_.assign(size_t(vocab), 0);
  if (p_.grammar) {
    if (!p_.grammar_vocab) fail("logits processor: a grammar without its vocabulary");
    matcher_ = std::make_unique<JsonMatcher>(p_.grammar, p_.grammar_vocab);
    allowed_.assign(size_t(p_.grammar_vocab->size()), 0);
  }
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
  if (!count_.empty() && count_[size_t(token)]++ == 0) distinct_.push_back(token);
  if (matcher_ && refused_ == SIZE_MAX && !matcher_->push(token)) refused_ = history_.size() - 1;
}

void LogitsProcessor::pop_to(size_t n) {
  while (history_.size() > n) {
    const int32_t t = history_.back();
    history_.pop_back();
    if (matcher_) {  // the matcher holds the tokens before the refused one
      if (refused_ == SIZE_MAX) matcher_->pop();
      else if (refused_ == history_.size()) refused_ = SIZE_MAX;
    }
    // Pushes and pops nest, so a token whose count drops to 0 is the last one first pushed.
    if (!count_.empty() && --count_[size_t(t)] == 0) distinct_.pop_back();
  }
}

namespace {
float repeat_penalised(float l, float rp) { return l > 0.f ? l / rp : l * rp; }
}  // namespace

void LogitsProcessor::mask(float* logits) const {
  if (!matcher_ || refused_ != SIZE_MAX) return;
  matcher_->allowed(allowed_.data());
  const int n = std::min(vocab_, int(allowed_.size()));
  bool any = false;
  for (int v = 0; v < n && !any; ++v) any = allowed_[size_t(v)] && logits[v] > -std::numeric_limits<float>::infinity();
  if (!any) return;
  for (int v = 0; v < n; ++v)
    if (!allowed_[size_t(v)]) logits[v] = -std::numeric_limits<float>::infinity();
  for (int v = n; v < vocab_; ++v) logits[v] = -std::numeric_limits<float>::infinity();  // ids past the tokenizer's
}

void LogitsProcessor::apply(float* logits) const {
  mask(logits);
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
