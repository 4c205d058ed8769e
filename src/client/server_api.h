// The parts of a dspark (or vLLM) server's HTTP API that the client reads: the base URL,
// GET /health, GET /v1/models, POST /tokenize and /detokenize and the speculative-decoding
// counters of GET /metrics.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "client/prom_text.h"

namespace dspark {

// http://HOST:PORT[/PREFIX]; only plain http (the benchmark runs on loopback or a LAN).
struct ServerUrl {
  std::string host;
  int port = 80;
  std::string prefix;  // path before /v1/..., without a trailing slash ("" usually)
  std::string text() const;
};
// Throws Error naming `what` (e.g. "flag --base-url") when the URL is not
// http://HOST[:PORT][/PATH].
ServerUrl parse_server_url(const std::string& url, const std::string& what);

struct HttpReply {
  int status = -1;   // -1: no response (the message says why)
  std::string body;  // the body, or the transport error's name
};
// One GET with a timeout; an "Authorization: Bearer" header when api_key is not empty.
HttpReply http_get(const ServerUrl& url, const std::string& path, const std::string& api_key,
                   double timeout_s);

// One POST of a JSON body, as http_get.
HttpReply http_post(const ServerUrl& url, const std::string& path, const std::string& body,
                    const std::string& api_key, double timeout_s);

// The id of the first model GET /v1/models lists (vLLM bench serve's default). Throws Error.
std::string first_served_model(const ServerUrl& url, const std::string& api_key);

// vLLM's speculative-decoding counters (vllm:spec_decode_*), summed over the samples of one model.
struct SpecCounters {
  bool present = false;  // the server exports vllm:spec_decode_num_drafts_total
  double drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  std::map<int, double> accepted_per_pos;  // by the "position" label
  double preemptions = 0;                  // vllm:num_preemptions_total
};
// Scrapes GET /metrics. Throws Error when the server does not answer 200 or the text is malformed.
SpecCounters scrape_spec_counters(const ServerUrl& url, const std::string& model_name,
                                  const std::string& api_key);

// Acceptance between two scrapes: length 1 + accepted/drafts and rate accepted/draft_tokens
// (null without drafts), the deltas, and the per-position acceptance rate.
nlohmann::json spec_delta_json(const SpecCounters& before, const SpecCounters& after);

}  // namespace dspark
