// Log-probabilities in OpenAI's and vLLM's response shapes: a chat choice's
// {"content": [{token, logprob, bytes, top_logprobs}]}, a completion choice's legacy
// {tokens, token_logprobs, top_logprobs, text_offset}, and vLLM's prompt_logprobs list. Token
// strings are each token decoded alone (a partial UTF-8 character becomes U+FFFD); `bytes` are the
// token's raw bytes (which reassemble a character split over tokens, as OpenAI's do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/logprobs.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

// Token `id` decoded alone ("" for an id the tokenizer lacks, such as a model's padding rows).
std::string token_string(const Tokenizer& tok, int32_t id);

// A chat choice's logprobs of `lp`'s tokens with `top_n` top entries each (sorted, most likely
// first): {"content": [...]}.
nlohmann::ordered_json chat_logprobs(const Logprobs& lp, int top_n, const Tokenizer& tok);

// A completion choice's legacy logprobs, built over a response's chunks: text_offset counts the
// characters (code points) of the token strings before each token, from the response's start.
class CompletionLogprobs {
 public:
  CompletionLogprobs(const Tokenizer& tok, int top_n) : tok_(tok), top_n_(top_n) {}
  // The echoed prompt's tokens: the first with null logprobs, the others from `plp` (prompt tokens
  // 1 .. n-1, as RequestOutput::prompt_logprobs).
  void add_prompt(std::span<const int32_t> prompt, const Logprobs& plp);
  // Generated tokens. Each top_logprobs entry maps token strings to log-probabilities: the chosen
  // token first, then the top_n most likely (as vLLM writes them).
  void add(const Logprobs& lp);
  // The entries added since the last take.
  nlohmann::ordered_json take();

 private:
  void entry(int32_t token, const float* logprob, const int32_t* top_ids, const float* top_lps,
             int top_n);
  const Tokenizer& tok_;
  int top_n_;
  size_t offset_ = 0;
  nlohmann::ordered_json tokens_ = nlohmann::ordered_json::array(),
                         logprobs_ = nlohmann::ordered_json::array(),
                         top_ = nlohmann::ordered_json::array(),
                         offsets_ = nlohmann::ordered_json::array();
};

// vLLM's prompt_logprobs: null for the first prompt token, then per token
// {"<id>": {"logprob", "rank", "decoded_token"}}: the prompt token first, then the top_n most
// likely.
nlohmann::ordered_json prompt_logprobs_json(std::span<const int32_t> prompt, const Logprobs& plp,
                                            int top_n, const Tokenizer& tok);

}  // namespace dspark
