// The online trainer's client of OpenAI-compatible servers (dspark serve; vLLM with a
// hidden-states connector): chat requests whose responses name the stored hidden states
// (../shared/reference/vllm_mooncake.md 4.4, "Trainer request path"), the servers' load, and the
// drafter hot-reload call. URLs, GET and transport errors come from the HTTP client
// (client/server_api.h), which links no model code.
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "client/server_api.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Client;
}

namespace dspark::train {

// The body of a chat request for hidden states: greedy, max_tokens, the ids of prompt and answer,
// and the connector's include_output_tokens (the answer's hidden states too).
nlohmann::json chat_request_body(const std::string& model, const std::vector<ChatMessage>& messages,
                                 int max_tokens);

// What the trainer reads of a 200 response: top-level prompt_token_ids, kv_transfer_params.handle
// and choices[0].token_ids.
struct ChatReply {
  std::vector<int32_t> prompt_ids, token_ids;
  std::string handle;
};
// Error naming `where` (the server and request id) and the field when the body is not JSON or a
// field is missing or mistyped (a server without the hidden-states connector: no handle).
ChatReply parse_chat_reply(const std::string& body, const std::string& where);

// A request that must not be retried on another server (a 4xx other than 408 and 429).
inline bool is_final_status(int status) {
  return status >= 400 && status < 500 && status != 408 && status != 429;
}

// The backoff before retry `k` (0-based) of a failed request: 0.5 s, 1, 2, 4, 8, 8, ...
double retry_backoff_s(int k);

// The servers one trainer spreads its requests over, each with its served model name and counts.
class ServerPool {
 public:
  struct Counts {
    int64_t requests = 0;  // sent
    int64_t ok = 0;        // answered 200
    int64_t failed = 0;    // transport errors and error statuses
    int in_flight = 0;
  };
  // Asks each server for its model (GET /v1/models), retrying for up to `wait_s` seconds while it
  // starts; Error naming the flag and the server that never answered. Error naming --servers for
  // a malformed or repeated URL.
  ServerPool(const std::vector<std::string>& urls, const std::string& api_key, double wait_s);

  size_t size() const { return servers_.size(); }
  const std::string& url(size_t i) const { return servers_[i].text; }
  const std::string& model(size_t i) const { return servers_[i].model; }
  // Picks the server with the fewest of this trainer's requests in flight (ties: the fewest sent,
  // then the first), avoiding `avoid` when another exists, and counts the request on it.
  size_t acquire(int avoid = -1);
  void release(size_t i, bool ok);
  Counts counts(size_t i) const;

  // POST a JSON body to server i; status -1 (body: the transport error) when nothing came back.
  // While it runs, stop_all() aborts it.
  HttpReply post(size_t i, const std::string& path, const std::string& body,
                 const std::string& request_id, double timeout_s);
  // Aborts every request in flight (the trainer stops) and refuses new ones.
  void stop_all();

 private:
  struct Server {
    std::string text;  // the URL as given
    ServerUrl url;
    std::string model;
    Counts counts;
  };
  std::string api_key_;
  std::vector<Server> servers_;
  mutable std::mutex mu_;
  std::set<httplib::Client*> active_;
  bool stopped_ = false;
};

}  // namespace dspark::train
