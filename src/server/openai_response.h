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

// What every object of one response repeats.
struct ResponseMeta {
  ApiKind kind = ApiKind::Completion;
  std::string id;       // "cmpl-<request id>" or "chatcmpl-<request id>"
  int64_t created = 0;  // unix seconds
  std::string model;    // the served model name
  bool return_token_ids = false;
  std::vector<int32_t> prompt_token_ids;
  // vLLM's kv_transfer_params of the response ({"handle": ...} for an exported request); null:
  // none.
  nlohmann::ordered_json kv_transfer_params;
  // Log-probabilities and echo (OpenAiRequest's logprobs, prompt_logprobs, echo); the prompt's ids
  // and, for echo, its text; `tok` spells the tokens.
  int logprobs = -1;
  int prompt_logprobs = -1;
  bool echo = false;
  std::string echo_text;
  std::vector<int32_t> prompt;
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

ResponseMeta make_response_meta(ApiKind kind, const std::string& request_id,
                                const std::string& model, bool return_token_ids,
                                std::vector<int32_t> prompt_token_ids);

// OpenAI's usage, with prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache
// served.
nlohmann::ordered_json usage_json(int prompt_tokens, int completion_tokens, int cached_tokens);

// vLLM's stop_reason for a finished output: the stop token id (not an end-of-sequence id) or the
// stop string that ended it; null otherwise (end of sequence, length, abort).
nlohmann::ordered_json stop_reason_value(const RequestOutput& out);

// The whole (non-streaming) response; with echo the prompt's text goes before `text`.
nlohmann::ordered_json completion_response(const ResponseMeta& meta, const std::string& text,
                                           const std::vector<int32_t>& token_ids,
                                           const ResponseLogprobs& lp,
                                           const std::string& finish_reason,
                                           const nlohmann::ordered_json& stop_reason,
                                           int prompt_tokens, int completion_tokens,
                                           int cached_tokens);

// JSON text as sent: invalid UTF-8 (never expected from the engine) becomes U+FFFD.
std::string dump_json(const nlohmann::ordered_json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_event(const nlohmann::ordered_json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// Turns a request's engine outputs into SSE chunks, in order. A chunk carries the log-probabilities
// of the tokens that arrived since the previous chunk (outputs whose text is held back send no
// chunk; their tokens' entries go with the next one). With echo the first chunk's text starts with
// the prompt (and its logprobs with the prompt's).
class StreamFormatter {
 public:
  StreamFormatter(ResponseMeta meta, bool include_usage);
  // The events for one engine output ("" when it carries nothing to send). After the finishing
  // output this includes the usage chunk (with include_usage) and [DONE].
  std::string on_output(const RequestOutput& out);
  bool finished() const { return finished_; }

 private:
  nlohmann::ordered_json chunk(nlohmann::ordered_json choice) const;
  nlohmann::ordered_json with_transfer(nlohmann::ordered_json c, bool last) const;
  nlohmann::ordered_json logprobs_value();
  ResponseMeta meta_;
  ResponseLogprobs held_;  // entries not sent yet
  std::unique_ptr<CompletionLogprobs> legacy_;
  bool include_usage_;
  bool first_ = true;
  bool finished_ = false;
};

}  // namespace dspark
