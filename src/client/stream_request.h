// One streaming OpenAI request, timed the way `vllm bench serve` times it
// (../shared/reference/vllm_mooncake.md section 3.6):
//   TTFT  from sending to the first SSE chunk that carries generated text (a chunk with choices
//         but no text yet, such as a role-only first delta, does not end it; a response with no
//         text at all takes the first chunk with choices);
//   ITL   between successive chunks that carry text (one per engine step: with speculative
//         decoding a chunk may hold several tokens);
//   E2EL  from sending to the last data chunk (the usage chunk, usually);
//   output tokens from the usage chunk's completion_tokens (stream_options.include_usage).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/server_api.h"

namespace dspark {

struct StreamRequest {
  std::string path;  // /v1/chat/completions or /v1/completions
  bool chat = true;  // chat chunks carry choices[0].delta.content, completions choices[0].text
  std::string body;  // the JSON body (with "stream": true)
  std::string request_id;  // sent as x-request-id when not empty
  std::string api_key;     // sent as "Authorization: Bearer" when not empty
  double timeout_s = 600;  // connect and per-read timeout
};

struct StreamOutcome {
  bool success = false;
  std::string error;          // why it failed: transport error, HTTP status and body, error event
  double ttft = 0, e2el = 0;  // seconds
  std::vector<double> itl;    // seconds between text chunks
  int64_t prompt_tokens = 0, output_tokens = 0;
  bool usage_reported = false;  // false: output_tokens counts text chunks instead
  int text_chunks = 0;
  double first_choices_s = -1;  // the first chunk with choices (-1: none yet)
  std::string text;
  std::string finish_reason;
};

// Sends the request and reads the stream to its end. Never throws for a failed request: the
// outcome says what went wrong.
StreamOutcome send_stream_request(const ServerUrl& url, const StreamRequest& req);

// Interprets one SSE data payload into `out` (exposed for tests). `now_s` is the time since the
// request was sent; `last_text_s` the time of the previous text chunk (updated). Sets `done` and
// returns false at "[DONE]". A payload that is not JSON, or an error object, marks the outcome
// failed (out.error).
bool consume_sse_data(const std::string& data, bool chat, double now_s, double& last_text_s,
                      StreamOutcome& out, bool& done);

}  // namespace dspark
