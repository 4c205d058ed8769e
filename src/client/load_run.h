// One benchmark run against a serving endpoint, in the manner of `vllm bench serve`: a test
// request (readiness), untimed warm-ups, then num_prompts streaming requests sent at Poisson
// arrival times (or all at once), at most max_concurrency in flight (one thread each), with the
// server's speculative-decoding counters scraped from /metrics before and after.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/server_api.h"

namespace dspark {

struct LoadOptions {
  ServerUrl url;
  std::string api_key;
  std::string endpoint = "/v1/chat/completions";  // or /v1/completions
  std::string model;  // the request's "model", and the model_name label read from /metrics
  std::vector<std::string> prompts;  // request i sends prompts[i % size]
  std::vector<std::string> warmup_prompts;  // the warm-ups' (empty: `prompts`)
  int num_prompts = 10;
  int max_concurrency = 0;         // 0: unbounded (every request may be in flight)
  double request_rate = INFINITY;  // requests/s with Poisson arrivals; inf: all at time 0
  int max_tokens = 128;
  double temperature = 0;
  uint64_t seed = 0;  // arrivals; request i is sent "seed": seed + i
  bool ignore_eos = false;
  int logprobs = -1;       // >= 0: ask for logprobs with this many top entries (vLLM's --logprobs)
  int num_warmups = 0;     // untimed requests before the run, at its concurrency
  double timeout_s = 600;  // per request: connect and every read
  std::string request_id_prefix = "dspark-bench";
};

// Threads are capped: "unbounded" concurrency runs at most this many requests at once.
inline constexpr int kMaxInFlight = 1024;

// The request body for prompt `text` as request `index`.
std::string request_body(const LoadOptions& o, const std::string& text, int64_t index,
                         int max_tokens);

// Poisson arrival offsets (seconds from the start) for n requests at `rate` per second, rescaled
// so that the n intervals add up to n / rate (vLLM's rule); all zeros when rate is inf.
std::vector<double> poisson_arrivals(int n, double rate, uint64_t seed);

// Runs the benchmark. Failed requests are counted and described in the result, never thrown;
// a failed test request (the server cannot serve at all) throws Error. The result holds the
// settings, completed/failed, duration_s, throughputs, ttft_ms/tpot_ms/itl_ms/e2el_ms summaries,
// spec_decode (acceptance from /metrics), errors and per-request figures.
nlohmann::json run_load(const LoadOptions& o);

}  // namespace dspark
