// OpenAI response objects (completion, chat.completion and their stream chunks) and SSE framing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "server/openai_logprobs.h"
#include "server/openai_request.h"

namespace dspark {

// A prompt of the response, as its choices show it.
struct ResponsePrompt {
  std::vector<int32_t> ids;
  std::string echo_text;  // with echo: the text the choice's text starts with
};

// What every object of one response repeats.
struct ResponseMeta {
  ApiKind kind = ApiKind::Completion;
  std::string id;       // "cmpl-<request id>" or "chatcmpl-<request id>"
  int64_t created = 0;  // unix seconds
  std::string model;    // the served model name
  bool return_token_ids = false;
  // The prompts: choice i's is prompts[i / n].
  std::vector<ResponsePrompt> prompts;
  int n = 1;
  int num_choices() const { return int(prompts.size()) * n; }
  const ResponsePrompt& prompt_of(int choice) const { return prompts[size_t(choice / n)]; }
  // vLLM's kv_transfer_params of the response ({"handle": ...} for an exported request); null:
  // none.
  nlohmann::ordered_json kv_transfer_params;
  // Log-probabilities and echo (OpenAiRequest's logprobs, prompt_logprobs, echo); `tok` spells
  // the tokens.
  int logprobs = -1;
  int prompt_logprobs = -1;
  bool echo = false;
  const Tokenizer* tok = nullptr;
};

// A response's log-probabilities as the engine's outputs bring them.
struct ResponseLogprobs {
  Logprobs tokens;  // the generated tokens' (RequestOutput::logprobs)
  Logprobs prompt;  // the prompt's (RequestOutput::prompt_logprobs)
  void add(const RequestOutput& o) {
    tokens.append(o.logprobs);
    prompt.append(o.prompt_logprobs);
  }
  void clear() {
    tokens.clear();
    prompt.clear();
  }
};

// The meta of a request's response (id, created, model, prompts, n, logprobs, echo); the
// prompts must be tokenized (encode_prompt).
ResponseMeta make_response_meta(const OpenAiRequest& r, const std::string& request_id,
                                const std::string& model, const Tokenizer& tok);

// vLLM's stop_reason for a finished output: the stop token id (not an end-of-sequence id) or the
// stop string that ended it; null otherwise (end of sequence, length, abort).
nlohmann::ordered_json stop_reason_value(const RequestOutput& out);

// One choice: its engine outputs gathered (the text, ids and log-probabilities only for a
// non-streamed response) and its totals.
struct ChoiceOutput {
  std::string text;
  std::vector<int32_t> ids;
  ResponseLogprobs logprobs;
  std::string finish_reason, error;
  nlohmann::ordered_json stop_reason;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  bool finished = false;
  // Adds an output (its pieces too with `keep`); returns whether it finished the choice.
  bool add(const RequestOutput& o, bool keep);
};

// OpenAI's usage of a response's choices (n per prompt): prompt_tokens counts each prompt once
// (vLLM's sum over the prompts), completion_tokens sums every choice's, and
// prompt_tokens_details.cached_tokens is, per prompt, the prompt tokens the prefix cache served
// its first choice (so never above prompt_tokens).
nlohmann::ordered_json usage_json(const std::vector<ChoiceOutput>& choices, int n);

// The whole (non-streaming) response of finished choices; with echo each choice's text starts
// with its prompt's.
nlohmann::ordered_json completion_response(const ResponseMeta& meta,
                                           const std::vector<ChoiceOutput>& choices);

// JSON text as sent: invalid UTF-8 (never expected from the engine) becomes U+FFFD.
std::string dump_json(const nlohmann::ordered_json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_event(const nlohmann::ordered_json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// Turns a request's engine outputs into SSE chunks, in order; each chunk holds one choice (its
// `index`), and each choice ends with its own finish_reason chunk. A chunk carries the
// log-probabilities of the choice's tokens that arrived since its previous chunk (outputs whose
// text is held back send no chunk; their tokens' entries go with the next one). With echo a
// choice's first chunk's text starts with its prompt (and its logprobs with the prompt's).
class StreamFormatter {
 public:
  StreamFormatter(ResponseMeta meta, bool include_usage);
  // The events for one engine output of choice `index` ("" when it carries nothing to send).
  // After the output that finishes the last choice this includes the usage chunk (with
  // include_usage) and [DONE].
  std::string on_output(int index, const RequestOutput& out);
  bool finished() const { return left_ == 0; }

 private:
  struct Choice {
    ResponseLogprobs held;  // entries not sent yet
    std::unique_ptr<CompletionLogprobs> legacy;
    bool first = true;
  };
  nlohmann::ordered_json chunk(nlohmann::ordered_json choice) const;
  nlohmann::ordered_json with_transfer(nlohmann::ordered_json c, bool last) const;
  nlohmann::ordered_json logprobs_value(int index);
  ResponseMeta meta_;
  std::vector<Choice> choices_;
  std::vector<ChoiceOutput> totals_;
  bool include_usage_;
  int left_;  // choices not finished
};

}  // namespace dspark
