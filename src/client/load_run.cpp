#include "client/load_run.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "client/latency_stats.h"
#include "client/stream_request.h"
#include "core/error.h"

namespace dspark {

namespace {

using Clock = std::chrono::steady_clock;

struct Timed {
  StreamOutcome out;
  double sent_s = 0;  // when it was sent, from the run's start
};

StreamRequest make_request(const LoadOptions& o, const std::string& text, int64_t index,
                           int max_tokens, const std::string& tag) {
  StreamRequest r;
  r.path = o.endpoint;
  r.chat = o.endpoint == "/v1/chat/completions";
  r.body = request_body(o, text, index, max_tokens);
  r.request_id = o.request_id_prefix + "-" + tag + "-" + std::to_string(index);
  r.api_key = o.api_key;
  r.timeout_s = o.timeout_s;
  return r;
}

// Sends requests first..first+n-1, each no earlier than its arrival offset, with at most
// `concurrency` in flight (workers take requests in order, so each starts at the later of its
// arrival and a free slot).
std::vector<Timed> dispatch(const LoadOptions& o, const std::vector<std::string>& prompts,
                            int64_t first, int n, int concurrency,
                            const std::vector<double>& arrivals, const std::string& tag,
                            Clock::time_point& t0) {
  std::vector<Timed> results(size_t(std::max(n, 0)));
  if (n <= 0) return results;
  const int workers = std::min({n, concurrency > 0 ? concurrency : n, kMaxInFlight});
  std::atomic<int> next{0};
  t0 = Clock::now();
  auto work = [&] {
    for (int i; (i = next.fetch_add(1)) < n;) {
      const auto at = t0 + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(arrivals[size_t(i)]));
      std::this_thread::sleep_until(at);
      const int64_t idx = first + i;
      const std::string& text = prompts[size_t(idx % int64_t(prompts.size()))];
      Timed& t = results[size_t(i)];
      t.sent_s = std::chrono::duration<double>(Clock::now() - t0).count();
      try {
        t.out = send_stream_request(o.url, make_request(o, text, idx, o.max_tokens, tag));
      } catch (const std::exception& e) {  // never lose a worker: the request failed
        t.out = StreamOutcome{};
        t.out.error = std::string("client: ") + e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(size_t(workers));
  for (int w = 0; w < workers; ++w) pool.emplace_back(work);
  for (auto& th : pool) th.join();
  return results;
}

nlohmann::json settings_json(const LoadOptions& o) {
  return {{"base_url", o.url.text()},
          {"endpoint", o.endpoint},
          {"model", o.model},
          {"num_prompts", o.num_prompts},
          {"max_concurrency",
           o.max_concurrency > 0 ? nlohmann::json(o.max_concurrency) : nlohmann::json()},
          {"request_rate",
           std::isfinite(o.request_rate) ? nlohmann::json(o.request_rate) : nlohmann::json("inf")},
          {"max_tokens", o.max_tokens},
          {"temperature", o.temperature},
          {"seed", o.seed},
          {"ignore_eos", o.ignore_eos},
          {"logprobs", o.logprobs >= 0 ? nlohmann::json(o.logprobs) : nlohmann::json()},
          {"num_warmups", o.num_warmups},
          {"distinct_prompts", o.prompts.size()}};
}

}  // namespace

std::string request_body(const LoadOptions& o, const std::string& text, int64_t index,
                         int max_tokens) {
  nlohmann::json b;
  b["model"] = o.model;
  if (o.endpoint == "/v1/chat/completions") {
    b["messages"] = nlohmann::json::array({{{"role", "user"}, {"content", text}}});
    b["max_completion_tokens"] = max_tokens;
    if (o.logprobs >= 0) {
      b["logprobs"] = true;
      b["top_logprobs"] = o.logprobs;
    }
  } else {
    b["prompt"] = text;
    b["max_tokens"] = max_tokens;
    if (o.logprobs >= 0) b["logprobs"] = o.logprobs;
  }
  b["temperature"] = o.temperature;
  b["seed"] = o.seed + uint64_t(index);
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  if (o.ignore_eos) b["ignore_eos"] = true;
  return b.dump();
}

std::vector<double> poisson_arrivals(int n, double rate, uint64_t seed) {
  std::vector<double> t(size_t(std::max(n, 0)), 0.0);
  if (n <= 0 || !std::isfinite(rate)) return t;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> gaps(static_cast<size_t>(n));
  double total = 0;
  for (auto& g : gaps) total += (g = gap(rng));
  const double scale = total > 0 ? (double(n) / rate) / total : 0;
  // The first request goes at 0; request i after the first i gaps (the last gap is the tail).
  for (int i = 1; i < n; ++i) t[size_t(i)] = t[size_t(i - 1)] + gaps[size_t(i - 1)] * scale;
  return t;
}

nlohmann::json run_load(const LoadOptions& o) {
  if (o.prompts.empty()) fail("no prompts");
  const std::vector<std::string>& warmups = o.warmup_prompts.empty() ? o.prompts : o.warmup_prompts;
  // Readiness: one short request must succeed before anything is timed.
  {
    const StreamOutcome t = send_stream_request(
        o.url, make_request(o, warmups[0], 0, std::min(o.max_tokens, 8), "test"));
    if (!t.success) fail("the test request to ", o.url.text(), o.endpoint, " failed: ", t.error);
  }
  Clock::time_point t0;
  if (o.num_warmups > 0) {
    const int c =
        o.max_concurrency > 0 ? std::min(o.max_concurrency, o.num_warmups) : o.num_warmups;
    dispatch(o, warmups, 0, o.num_warmups, c, std::vector<double>(size_t(o.num_warmups), 0.0),
             "warmup", t0);
  }
  nlohmann::json result = settings_json(o);
  SpecCounters before, after;
  std::string metrics_error;
  try {
    before = scrape_spec_counters(o.url, o.model, o.api_key);
  } catch (const Error& e) {
    metrics_error = e.what();
  }
  const auto arrivals = poisson_arrivals(o.num_prompts, o.request_rate, o.seed);
  auto timed = dispatch(o, o.prompts, 0, o.num_prompts, o.max_concurrency, arrivals, "run", t0);
  const double duration = std::chrono::duration<double>(Clock::now() - t0).count();
  if (metrics_error.empty()) {
    try {
      after = scrape_spec_counters(o.url, o.model, o.api_key);
    } catch (const Error& e) {
      metrics_error = e.what();
    }
  }

  std::vector<double> ttft, tpot, itl, e2el;
  nlohmann::json per_ttft = nlohmann::json::array(), per_e2el = nlohmann::json::array(),
                 per_out = nlohmann::json::array(), per_sent = nlohmann::json::array();
  std::map<std::string, int> errors;
  int completed = 0, failed = 0, usage_missing = 0;
  int64_t in_tokens = 0, out_tokens = 0;
  for (const auto& t : timed) {
    const StreamOutcome& r = t.out;
    per_sent.push_back(t.sent_s);
    if (!r.success) {
      ++failed;
      ++errors[r.error];
      per_ttft.push_back(nullptr);
      per_e2el.push_back(nullptr);
      per_out.push_back(nullptr);
      continue;
    }
    ++completed;
    usage_missing += !r.usage_reported;
    in_tokens += r.prompt_tokens;
    out_tokens += r.output_tokens;
    ttft.push_back(r.ttft);
    e2el.push_back(r.e2el);
    if (r.output_tokens > 1) tpot.push_back((r.e2el - r.ttft) / double(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    per_ttft.push_back(r.ttft * 1e3);
    per_e2el.push_back(r.e2el * 1e3);
    per_out.push_back(r.output_tokens);
  }
  const double d = std::max(duration, 1e-9);
  result["completed"] = completed;
  result["failed"] = failed;
  result["duration_s"] = duration;
  result["total_input_tokens"] = in_tokens;
  result["total_output_tokens"] = out_tokens;
  result["request_throughput"] = completed / d;
  result["output_throughput"] = double(out_tokens) / d;
  result["total_token_throughput"] = double(in_tokens + out_tokens) / d;
  result["ttft_ms"] = summary_json(summarize(ttft), 1e3);
  result["tpot_ms"] = summary_json(summarize(tpot), 1e3);
  result["itl_ms"] = summary_json(summarize(itl), 1e3);
  result["e2el_ms"] = summary_json(summarize(e2el), 1e3);
  result["usage_missing"] = usage_missing;
  if (metrics_error.empty()) {
    result["spec_decode"] = spec_delta_json(before, after);
  } else {
    result["spec_decode"] = nullptr;
    result["metrics_error"] = metrics_error;
  }
  nlohmann::json errs = nlohmann::json::array();
  for (const auto& [msg, n] : errors) errs.push_back({{"message", msg}, {"count", n}});
  result["errors"] = errs;
  result["per_request"] = {{"sent_s", per_sent},
                           {"ttft_ms", per_ttft},
                           {"e2el_ms", per_e2el},
                           {"output_tokens", per_out}};
  return result;
}

}  // namespace dspark
