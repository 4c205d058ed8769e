// What a request asks of the target's logits before sampling, in vLLM's order: the structured
// output's token mask (response_format), logit_bias, then the repetition, frequency and presence
// penalties; temperature, top-k, top-p and min-p follow (Sampler). A request's processor holds
// the tokens generated so far; drafting and verification push the drafts they try on top and pop
// them afterwards, so every distribution a round samples or verifies from is the one plain
// decoding would use after the same tokens. That keeps speculative output distributed exactly as
// plain decoding with these settings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "sample/json_constraint.h"

namespace dspark {

struct LogitsParams {
  // OpenAI's: subtracted once from the logit of every token the output holds (presence) and
  // once per occurrence (frequency); each in [-2, 2].
  float presence_penalty = 0.f;
  float frequency_penalty = 0.f;
  // vLLM's (CTRL's): the logit of every token in the prompt or the output is divided by it
  // where positive, multiplied where negative; > 0, 1 is off.
  float repetition_penalty = 1.f;
  // Added to the listed tokens' logits, each in [-100, 100] (OpenAI's range; -100 bans a token).
  std::vector<std::pair<int32_t, float>> logit_bias;
  // response_format json_object / json_schema: the output stays a prefix of a text the grammar
  // allows (tokens that would leave it get -inf), over the tokenizer's bytes in grammar_vocab.
  std::shared_ptr<const JsonGrammar> grammar;
  std::shared_ptr<const TokenVocab> grammar_vocab;

  // Whether any penalty is on (they count the output's tokens).
  bool penalties() const {
    return presence_penalty != 0.f || frequency_penalty != 0.f || repetition_penalty != 1.f;
  }
  bool any() const { return penalties() || !logit_bias.empty() || grammar; }
  // Throws Error naming the field (the request's param) for a value out of range or a
  // logit_bias token outside [0, vocab).
  void validate(int vocab) const;
};

// OpenAI's response_format object: null or {"type": "text"} give none; {"type": "json_object"}
// any JSON object; {"type": "json_schema", "json_schema": {"schema": {...}, ...}} the schema (the
// subset JsonGrammar compiles). Throws Error naming the field (response_format.type,
// response_format.json_schema.schema, ...) and, for a schema, the keyword and its path.
std::shared_ptr<const JsonGrammar> response_format_grammar(const nlohmann::json& rf);

class LogitsProcessor {
 public:
  // `prompt` matters to the repetition penalty only.
  LogitsProcessor(const LogitsParams& p, std::span<const int32_t> prompt, int vocab);

  // The output grows by `token`: emitted, or a draft being tried.
  void push(int32_t token);
  // Drops the tokens pushed after the first `n` (the drafts a round tried).
  void pop_to(size_t n);
  size_t depth() const { return history_.size(); }

  // Processes logits[vocab] for the token that follows the pushed ones, in place. The grammar's
  // mask is skipped where it would leave no finite logit (a drafter's row over a draft vocabulary
  // that holds none of the allowed tokens) and after a pushed token the grammar refused (a draft
  // that verification then rejects: its probability under the masked target is 0).
  void apply(float* logits) const;

 private:
  void mask(float* logits) const;

  LogitsParams p_;
  int vocab_;
  std::vector<int32_t> history_;       // every pushed token, in order
  std::vector<int32_t> count_;         // [vocab] occurrences in history_ (empty: no penalty)
  std::vector<int32_t> distinct_;      // history_'s distinct tokens, in first-push order
  std::vector<uint8_t> in_prompt_;     // [vocab] (with a repetition penalty)
  std::vector<int32_t> prompt_only_;   // prompt tokens, distinct
  std::unique_ptr<JsonMatcher> matcher_;
  mutable std::vector<uint8_t> allowed_;   // [matcher vocab] scratch
  size_t refused_ = SIZE_MAX;  // history_ index of the first token the matcher refused, if any
};

namespace testing {
// A deliberately wrong verification for tests: every row of a round is processed as if no draft
// had been pushed (the penalties and the grammar ignore the drafts before the row). Tests must
// show it is biased.
void set_processor_ignores_drafts(bool on);
bool processor_ignores_drafts();
}  // namespace testing

}  // namespace dspark
