#include "server/prometheus.h"

#include <charconv>
#include <cmath>
#include <initializer_list>
#include <tuple>
#include <vector>

namespace dspark {

namespace {

// Label values escape backslash, double quote and newline.
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

// Numbers as Prometheus' Python client writes them: shortest round trip, "1.0" not "1", "+Inf".
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

class Writer {
 public:
  explicit Writer(const std::string& model)
      : base_("model_name=\"" + escape_label(model) + "\",engine=\"0\"") {}

  void header(const std::string& name, const char* type, const char* help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void sample(const std::string& name, double v, const std::string& extra_labels = "") {
    out_ += name + "{" + base_ + (extra_labels.empty() ? "" : "," + extra_labels) + "} " +
            number(v) + "\n";
  }
  void gauge(const std::string& name, const char* help, double v) {
    header(name, "gauge", help);
    sample(name, v);
  }
  void counter(const std::string& name, const char* help, double v) {
    header(name + "_total", "counter", help);
    sample(name + "_total", v);
  }
  // Gauges and counters of one value each, in order.
  struct Scalar {
    bool counter;  // else a gauge
    const char* name;
    const char* help;
    double value;
  };
  void scalars(std::initializer_list<Scalar> list) {
    for (const Scalar& s : list)
      s.counter ? counter(s.name, s.help, s.value) : gauge(s.name, s.help, s.value);
  }
  void histogram(const std::string& name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    int64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += i < h.counts.size() ? h.counts[i] : 0;
      sample(name + "_bucket", double(cumulative), "le=\"" + number(h.bounds[i]) + "\"");
    }
    // +Inf is every observation (the count), whatever the overflow bucket says.
    sample(name + "_bucket", double(h.count), "le=\"+Inf\"");
    sample(name + "_count", double(h.count));
    sample(name + "_sum", h.sum);
  }
  std::string& out() { return out_; }

 private:
  std::string base_;
  std::string out_;
};

}  // namespace

std::string render_prometheus(const EngineMetrics& m, const std::string& model_name,
                              bool speculative) {
  Writer w(model_name);
  w.scalars({
      {false, "vllm:num_requests_running", "Number of requests in model execution batches.",
       double(m.num_requests_running)},
      {false, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
       double(m.num_requests_waiting)},
      {false, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
       m.kv_cache_usage_perc},
      {true, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
       double(m.num_preemptions)},
      {true, "vllm:prompt_tokens", "Number of prefill tokens processed.", double(m.prompt_tokens)},
      {true, "vllm:generation_tokens", "Number of generation tokens processed.",
       double(m.generation_tokens)},
      {true, "vllm:prefix_cache_queries",
       "Prefix cache queries, in terms of number of queried tokens.",
       double(m.prefix_cache_queries)},
      {true, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
       double(m.prefix_cache_hits)},
  });

  w.header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  std::map<std::string, int64_t> success = {{"stop", 0}, {"length", 0}, {"abort", 0}};
  for (const auto& [reason, n] : m.request_success) success[reason] = n;
  for (const auto& [reason, n] : success)
    w.sample("vllm:request_success_total", double(n),
             "finished_reason=\"" + escape_label(reason) + "\"");

  const std::tuple<const char*, const char*, const Histogram&> histograms[] = {
      {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft},
      {"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl},
      {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m.e2e},
      {"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
       m.queue_time},
  };
  for (const auto& [name, help, h] : histograms) w.histogram(name, help, h);

  if (speculative) {
    w.scalars({
        {true, "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.",
         double(m.spec_num_drafts)},
        {true, "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
         double(m.spec_num_draft_tokens)},
        {true, "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
         double(m.spec_num_accepted_tokens)},
    });
    w.header("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
             "Accepted tokens per draft position.");
    for (size_t i = 0; i < m.spec_num_accepted_tokens_per_pos.size(); ++i)
      w.sample("vllm:spec_decode_num_accepted_tokens_per_pos_total",
               double(m.spec_num_accepted_tokens_per_pos[i]),
               "position=\"" + std::to_string(i) + "\"");
    // dspark's own: how many drafts the verification policy chose to verify, per round.
    w.header(
        "dspark:spec_decode_verify_length_total", "counter",
        "Speculative rounds by the number of drafts verified (the length policy's choice of l).");
    for (size_t l = 0; l < m.spec_verify_length_hist.size(); ++l)
      w.sample("dspark:spec_decode_verify_length_total", double(m.spec_verify_length_hist[l]),
               "length=\"" + std::to_string(l) + "\"");
    w.gauge("dspark:drafter_version",
            "The drafter version new requests get (POST /v1/load_drafter).",
            double(m.drafter_version));
    const std::pair<const char*, int64_t EngineMetrics::PerDrafter::*> per[] = {
        {"dspark:spec_decode_num_drafts_by_drafter_total", &EngineMetrics::PerDrafter::drafts},
        {"dspark:spec_decode_num_draft_tokens_by_drafter_total",
         &EngineMetrics::PerDrafter::draft_tokens},
        {"dspark:spec_decode_num_accepted_tokens_by_drafter_total",
         &EngineMetrics::PerDrafter::accepted_tokens}};
    for (const auto& [name, field] : per) {
      w.header(name, "counter", "vllm:spec_decode_* of the requests each drafter version served.");
      for (const auto& [v, d] : m.spec_by_drafter)
        w.sample(name, double(d.*field), "drafter_version=\"" + std::to_string(v) + "\"");
    }
    w.counter("dspark:spec_decode_plain_steps",
              "Steps run without drafting: the length policy judged a plain step faster.",
              double(m.spec_plain_steps));
    w.counter("dspark:spec_decode_drafter_context_rows",
              "Positions the drafter took as context; rows of requests that never drafted "
              "after them are not taken.",
              double(m.drafter_context_rows));
  }
  w.counter("dspark:engine_steps", "Engine steps (one target forward each).", double(m.steps));
  return std::move(w.out());
}

}  // namespace dspark
