#include "client/report.h"

#include <cmath>
#include <string>

namespace dspark {

namespace {

double num(const nlohmann::json& j, const char* a, const char* b = nullptr) {
  if (!j.is_object() || !j.contains(a)) return NAN;
  const nlohmann::json* v = &j[a];
  if (b) {
    if (!v->is_object() || !v->contains(b)) return NAN;
    v = &(*v)[b];
  }
  return v->is_number() ? v->get<double>() : NAN;
}

std::string fmt(double v, const char* f = "%.2f") {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

void heading(std::FILE* out, const std::string& s, char c) {
  const size_t n = 50, pad = s.size() + 2 < n ? n - s.size() - 2 : 0;
  std::fprintf(out, "%s %s %s\n", std::string(pad / 2, c).c_str(), s.c_str(),
               std::string(pad - pad / 2, c).c_str());
}

void row(std::FILE* out, const std::string& k, const std::string& v) {
  std::fprintf(out, "%-40s %-10s\n", k.c_str(), v.c_str());
}

void latency(std::FILE* out, const nlohmann::json& r, const char* key, const char* title,
             const char* abbr) {
  heading(out, title, '-');
  row(out, std::string("Mean ") + abbr + " (ms):", fmt(num(r, key, "mean")));
  row(out, std::string("Median ") + abbr + " (ms):", fmt(num(r, key, "median")));
  row(out, std::string("P99 ") + abbr + " (ms):", fmt(num(r, key, "p99")));
}

}  // namespace

void print_run_report(std::FILE* out, const nlohmann::json& r) {
  heading(out, "Serving Benchmark Result", '=');
  row(out, "Successful requests:", std::to_string(r.value("completed", 0)));
  row(out, "Failed requests:", std::to_string(r.value("failed", 0)));
  row(out, "Maximum request concurrency:",
      std::isfinite(num(r, "max_concurrency")) ? fmt(num(r, "max_concurrency"), "%.0f")
                                               : "unbounded");
  row(out, "Request rate configured (RPS):",
      std::isfinite(num(r, "request_rate")) ? fmt(num(r, "request_rate")) : "inf");
  row(out, "Benchmark duration (s):", fmt(num(r, "duration_s")));
  row(out, "Total input tokens:", std::to_string(r.value("total_input_tokens", 0)));
  row(out, "Total generated tokens:", std::to_string(r.value("total_output_tokens", 0)));
  row(out, "Request throughput (req/s):", fmt(num(r, "request_throughput")));
  row(out, "Output token throughput (tok/s):", fmt(num(r, "output_throughput")));
  row(out, "Total token throughput (tok/s):", fmt(num(r, "total_token_throughput")));
  latency(out, r, "ttft_ms", "Time to First Token", "TTFT");
  latency(out, r, "tpot_ms", "Time per Output Token (excl. 1st token)", "TPOT");
  latency(out, r, "itl_ms", "Inter-token Latency", "ITL");
  latency(out, r, "e2el_ms", "End-to-end Latency", "E2EL");
  static const nlohmann::json none;
  const auto& s = r.contains("spec_decode") ? r["spec_decode"] : none;
  heading(out, "Speculative Decoding", '-');
  if (s.is_object() && num(s, "drafts") > 0) {
    row(out, "Acceptance rate (%):", fmt(100 * num(s, "acceptance_rate")));
    row(out, "Acceptance length:", fmt(num(s, "acceptance_length")));
    row(out, "Drafts:", fmt(num(s, "drafts"), "%.0f"));
    row(out, "Draft tokens:", fmt(num(s, "draft_tokens"), "%.0f"));
    row(out, "Accepted tokens:", fmt(num(s, "accepted_tokens"), "%.0f"));
    std::string pos;
    for (const auto& p : s["acceptance_rate_per_pos"])
      pos += (pos.empty() ? "" : " ") + fmt(p.is_number() ? 100 * p.get<double>() : NAN, "%.1f");
    if (!pos.empty()) std::fprintf(out, "Per-position acceptance rate (%%):\n  %s\n", pos.c_str());
  } else if (s.is_object()) {
    row(out, "Drafts:",
        s.value("metrics_present", false) ? "0 (no speculation)"
                                          : "- (no spec_decode counters: plain decoding)");
  } else {
    row(out, "Metrics:", "unavailable");
    if (r.contains("metrics_error"))
      std::fprintf(out, "  %s\n", r["metrics_error"].get<std::string>().c_str());
  }
  if (s.is_object() && num(s, "preemptions") > 0)
    row(out, "Preemptions:", fmt(num(s, "preemptions"), "%.0f"));
  std::fprintf(out, "%s\n", std::string(50, '=').c_str());
  if (r.value("usage_missing", 0) > 0)
    std::fprintf(out,
                 "note: %d responses had no usage chunk; their output tokens are text chunks\n",
                 r["usage_missing"].get<int>());
  if (r.contains("errors") && !r["errors"].empty()) {
    std::fprintf(out, "errors:\n");
    int shown = 0;
    for (const auto& e : r["errors"]) {
      if (++shown > 10) break;
      std::fprintf(out, "  %4d x %s\n", e["count"].get<int>(),
                   e["message"].get<std::string>().c_str());
    }
  }
}

void print_point_line(std::FILE* out, const nlohmann::json& p) {
  if (p.contains("error")) {
    std::fprintf(out, "bench serve: %-16s c=%-3d error: %s\n", p.value("config", "").c_str(),
                 p.value("concurrency", 0), p["error"].get<std::string>().c_str());
    return;
  }
  std::fprintf(
      out, "bench serve: %-16s c=%-3d %4d/%-4d ok  %8s tok/s  TTFT %8s ms  TPOT %7s ms  AL %s\n",
      p.value("config", "").c_str(), p.value("concurrency", 0), p.value("completed", 0),
      p.value("completed", 0) + p.value("failed", 0),
      fmt(num(p, "output_throughput"), "%.1f").c_str(),
      fmt(num(p, "ttft_ms", "median"), "%.1f").c_str(),
      fmt(num(p, "tpot_ms", "median"), "%.2f").c_str(),
      fmt(num(p, "spec_decode", "acceptance_length")).c_str());
}

void print_sweep_report(std::FILE* out, const nlohmann::json& sweep) {
  std::fprintf(out, "%-18s %5s %9s %10s %14s %10s %8s %7s\n", "config", "conc", "requests", "tok/s",
               "median TTFT ms", "TPOT ms", "accept", "failed");
  for (const auto& p : sweep["points"]) {
    if (p.contains("error")) {
      std::fprintf(out, "%-18s %5d error: %s\n", p.value("config", "").c_str(),
                   p.value("concurrency", 0), p["error"].get<std::string>().c_str());
      continue;
    }
    std::fprintf(out, "%-18s %5d %9d %10s %14s %10s %8s %7d\n", p.value("config", "").c_str(),
                 p.value("concurrency", 0), p.value("completed", 0) + p.value("failed", 0),
                 fmt(num(p, "output_throughput"), "%.1f").c_str(),
                 fmt(num(p, "ttft_ms", "median"), "%.1f").c_str(),
                 fmt(num(p, "tpot_ms", "median"), "%.2f").c_str(),
                 fmt(num(p, "spec_decode", "acceptance_length")).c_str(), p.value("failed", 0));
  }
  for (const auto& c : sweep["configs"])
    if (c.contains("error"))
      std::fprintf(out, "%-18s not run: %s\n", c.value("name", "").c_str(),
                   c["error"].get<std::string>().c_str());
  if (sweep.value("rounds", 1) > 1)
    std::fprintf(out,
                 "each row: the round of median tok/s of %d, the configs run in turn at each "
                 "concurrency (every round's tok/s: rounds_output_throughput in --json)\n",
                 sweep.value("rounds", 1));
  const auto& r = sweep["ratios"];
  if (!r.is_object() || !r.contains("high_concurrency")) return;
  const int lo = r["low_concurrency"].get<int>(), hi = r["high_concurrency"].get<int>();
  std::fprintf(out, "\nratios (accept = acceptance length, 1 + accepted/drafts, from /metrics):\n");
  if (r.contains("adaptive_over_plain_tok_s")) {
    std::fprintf(out, "  dspark-adaptive / plain tok/s:");
    for (const auto& e : r["adaptive_over_plain_tok_s"])
      std::fprintf(out, "  c=%d %sx", e["concurrency"].get<int>(),
                   fmt(e["ratio"].is_number() ? e["ratio"].get<double>() : NAN).c_str());
    std::fprintf(out, "   (goal: >= 1 everywhere, >= 2.5 at c=1)\n");
  }
  if (r.contains("adaptive_over_full_tok_s_at_high")) {
    const auto& v = r["adaptive_over_full_tok_s_at_high"];
    std::fprintf(out,
                 "  dspark-adaptive / dspark-full tok/s at c=%d: %sx   (goal: >= 1.2 at c=16)\n",
                 hi, fmt(v.is_number() ? v.get<double>() : NAN).c_str());
  }
  auto ratio_of = [](const nlohmann::json& e) {
    return fmt(e["ratio"].is_number() ? e["ratio"].get<double>() : NAN);
  };
  if (!r.contains("tok_s_high_over_low")) return;  // one concurrency only
  for (const auto& e : r["tok_s_high_over_low"])
    std::fprintf(out, "  %s tok/s c=%d / c=%d: %sx   (goal with DSpark: >= 3, 16 over 1)\n",
                 e["config"].get<std::string>().c_str(), hi, lo, ratio_of(e).c_str());
  for (const auto& e : r["median_ttft_high_over_low"])
    std::fprintf(out, "  %s median TTFT c=%d / c=%d: %sx   (goal: <= 1.5, 16 over 1)\n",
                 e["config"].get<std::string>().c_str(), hi, lo, ratio_of(e).c_str());
}

}  // namespace dspark
