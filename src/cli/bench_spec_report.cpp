#include "cli/bench_spec_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>

#include "client/svg_plot.h"
#include "core/error.h"

namespace dspark {

using json = nlohmann::json;

std::vector<int64_t> verify_length_hist(const SpecMetrics& m, int K) {
  std::vector<int64_t> h(size_t(std::max(K, 0)) + 1, 0);
  // verified_at[i]: rounds that verified more than i drafts (empty before the first round).
  auto more_than = [&](int i) {
    if (i < 0) return m.rounds;
    return size_t(i) < m.verified_at.size() ? m.verified_at[size_t(i)] : int64_t(0);
  };
  for (int l = 0; l <= K; ++l) h[size_t(l)] = more_than(l - 1) - more_than(l);
  return h;
}

namespace {

struct Group {
  int prompts = 0, identical = 0;
  int64_t plain_tokens = 0, spec_tokens = 0, prompt_tokens = 0;
  double plain_s = 0, spec_s = 0;
  SpecMetrics m;

  void add(const SpecPromptRun& r) {
    prompts++;
    identical += r.plain_tokens == r.spec_tokens;
    plain_tokens += int64_t(r.plain_tokens.size());
    spec_tokens += int64_t(r.spec_tokens.size());
    prompt_tokens += r.prompt_tokens;
    plain_s += r.plain_seconds;
    spec_s += r.spec_seconds;
    m.merge(r.metrics);
  }
};

json hist_json(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  json shares = json::array();
  for (int64_t c : counts) shares.push_back(total ? double(c) / double(total) : 0.0);
  return {{"counts", counts}, {"shares", shares}, {"rounds", total}};
}

// The identical count, or null with the reason at T > 0.
void put_identical(json& j, const SpecBenchSetup& s, int identical) {
  if (s.sampled) {
    j["identical_outputs"] = nullptr;
    j["identical_reason"] = kSampledIdenticalReason;
  } else {
    j["identical_outputs"] = identical;
  }
}

json summary(const Group& g, const SpecBenchSetup& s) {
  const double plain_tps = double(g.plain_tokens) / std::max(g.plain_s, 1e-9);
  const double spec_tps = double(g.spec_tokens) / std::max(g.spec_s, 1e-9);
  const double step_ms = 1e3 * g.plain_s / double(std::max<int64_t>(g.plain_tokens, 1));
  // Per round that drafted (each proposes K drafts; plain steps draft nothing), not per round:
  // when the length policy runs most steps plain, a mean over every round would hide the cost.
  const int K = std::max(1, s.num_speculative_tokens);
  const int64_t drafting_rounds = std::max<int64_t>(1, (g.m.proposed + K - 1) / K);
  const double draft_ms = 1e3 * g.m.draft_seconds / double(drafting_rounds);
  json j = g.m.to_json();
  j["prompts"] = g.prompts;
  j["mean_prompt_tokens"] = double(g.prompt_tokens) / double(std::max(g.prompts, 1));
  put_identical(j, s, g.identical);
  j["plain_tokens"] = g.plain_tokens;
  j["spec_tokens"] = g.spec_tokens;
  j["plain_tok_s"] = plain_tps;
  j["spec_tok_s"] = spec_tps;
  j["speedup"] = spec_tps / std::max(plain_tps, 1e-9);
  j["target_step_ms"] = step_ms;
  j["draft_ms_per_round"] = draft_ms;
  j["draft_cost_vs_target_step"] = draft_ms / std::max(step_ms, 1e-9);
  j["verify_length_hist"] = verify_length_hist(g.m, s.num_speculative_tokens);
  return j;
}

// Figures averaged over categories, each category once whatever its prompt count.
constexpr const char* kMeanFields[] = {
    "mean_prompt_tokens",       "plain_tok_s",          "spec_tok_s",      "speedup",
    "mean_accepted_length",     "mean_verified_drafts", "acceptance_rate", "draft_ms_per_round",
    "draft_cost_vs_target_step"};

}  // namespace

json spec_bench_report(const std::vector<SpecPromptRun>& runs, const SpecBenchSetup& s) {
  std::map<std::string, Group> by_cat;
  std::vector<std::string> order;
  Group all;
  for (const SpecPromptRun& r : runs) {
    const std::string& c = r.prompt->category;
    if (!by_cat.count(c)) order.push_back(c);
    by_cat[c].add(r);
    all.add(r);
  }
  json out;
  out["model"] = s.model;
  out["method"] = s.method;
  out["label"] = s.label;
  out["drafter"] = s.drafter;
  out["num_speculative_tokens"] = s.num_speculative_tokens;
  out["temperature"] = s.temperature;
  out["sampled"] = s.sampled;
  out["verify_lengths"] = s.verify_lengths;
  out["dtype"] = s.dtype;
  out["max_tokens"] = s.max_tokens;
  out["category_order"] = order;
  out["categories"] = json::object();
  for (const std::string& c : order) out["categories"][c] = summary(by_cat[c], s);
  json mean;
  mean["categories"] = int(order.size());
  mean["prompts"] = all.prompts;
  put_identical(mean, s, all.identical);
  for (const char* f : kMeanFields) {
    double sum = 0;
    for (const std::string& c : order) sum += out["categories"][c][f].get<double>();
    mean[f] = order.empty() ? 0.0 : sum / double(order.size());
  }
  mean["note"] =
      "unweighted mean of the category figures (each category counts once; speedup is the mean of "
      "the categories' speedups)";
  out["mean_over_categories"] = mean;
  out["all"] = summary(all, s);  // every prompt pooled: total tokens over total time
  out["all"]["note"] = "every prompt pooled: total tokens over total time";
  out["verify_length_hist"] = hist_json(verify_length_hist(all.m, s.num_speculative_tokens));
  out["verify_length_hist"]["note"] =
      "rounds that verified l drafts, l = 0..K, over the run; 0 = a plain step (no draft verified)";
  if (s.sampled) out["identical_reason"] = kSampledIdenticalReason;
  return out;
}

void print_spec_bench_report(const json& r, std::FILE* out) {
  const bool sampled = r["sampled"].get<bool>();
  std::fprintf(out, "%-18s %7s %10s %10s %8s %10s %15s  %s\n", "category", "prompts", "plain t/s",
               "spec t/s", "speedup", "tok/round", "verified/round", "identical");
  auto row = [&](const std::string& name, const json& j) {
    char ident[48];
    if (sampled)
      std::snprintf(ident, sizeof ident, "n/a (sampled)");
    else
      std::snprintf(ident, sizeof ident, "%d/%d", j["identical_outputs"].get<int>(),
                    j["prompts"].get<int>());
    std::fprintf(out, "%-18s %7d %10.1f %10.1f %7.2fx %10.2f %15.2f  %s\n", name.c_str(),
                 j["prompts"].get<int>(), j["plain_tok_s"].get<double>(),
                 j["spec_tok_s"].get<double>(), j["speedup"].get<double>(),
                 j["mean_accepted_length"].get<double>(), j["mean_verified_drafts"].get<double>(),
                 ident);
  };
  for (const auto& c : r["category_order"])
    row(c.get<std::string>(), r["categories"][c.get<std::string>()]);
  const json& mean = r["mean_over_categories"];
  row("mean of categories", mean);
  row("pooled", r["all"]);
  std::fprintf(
      out,
      "mean of categories: the %d category rows averaged, each counting once (speedup: the\n"
      "  mean of their speedups); pooled: every prompt's tokens over every prompt's time.\n"
      "verified/round: drafts the target verified per round, plain steps (0) included.\n",
      mean["categories"].get<int>());
  if (sampled)
    std::fprintf(out,
                 "identical n/a (sampled): sampled outputs differ by design; losslessness is a "
                 "property\n  of the distribution, proven by the chi-square tests "
                 "(tests/spec_decode, SpecLossless.*).\n");
  else if (r["dtype"] != "f32" && r["all"]["identical_outputs"] != r["all"]["prompts"])
    std::fprintf(out,
                 "identical: in %s the kernels sum in an order set by a step's row count, so a "
                 "near-tie\n  between two tokens can resolve differently when a round verifies "
                 "several rows;\n  --dtype f32 is token-identical (tests: "
                 "SpecLossless.F32GreedyIsTokenIdenticalForEveryMethod).\n",
                 r["dtype"].get<std::string>().c_str());
  const json& all = r["all"];
  const int K = r["num_speculative_tokens"].get<int>();
  std::fprintf(out,
               "drafting round %.2f ms = %.2fx a target step (%.2f ms), per round that drafted\n",
               all["draft_ms_per_round"].get<double>(),
               all["draft_cost_vs_target_step"].get<double>(), all["target_step_ms"].get<double>());
  std::fprintf(out, "drafts verified per round %.2f of %d proposed (%s)\n",
               all["mean_verified_drafts"].get<double>(), K,
               r["verify_lengths"].get<std::string>().c_str());
  const json& h = r["verify_length_hist"];
  std::fprintf(out, "verification lengths chosen over %lld rounds (0 = a plain step):\n",
               static_cast<long long>(h["rounds"].get<int64_t>()));
  std::fprintf(out, "  %6s %9s %7s\n", "length", "rounds", "share");
  for (size_t l = 0; l < h["counts"].size(); ++l) {
    const double share = h["shares"][l].get<double>();
    const std::string bar(size_t(share * 40 + 0.5), '#');
    std::fprintf(out, "  %6zu %9lld %6.1f%%%s%s\n", l,
                 static_cast<long long>(h["counts"][l].get<int64_t>()), 100 * share,
                 bar.empty() ? "" : "  ", bar.c_str());
  }
}

void print_spec_bench_comparison(const std::vector<json>& reports, std::FILE* out) {
  if (reports.empty()) return;
  std::fprintf(
      out,
      "\nside by side (the same prompts and plain runs; t/r: tokens per round, x: speedup, "
      "ms: drafting round):\n");
  for (size_t k = 0; k < reports.size(); ++k)
    std::fprintf(out, "  [%zu] %s\n", k + 1, reports[k]["label"].get<std::string>().c_str());
  std::fprintf(out, "%-18s %8s", "category", "tokens");
  for (size_t k = 0; k < reports.size(); ++k) {
    char h[3][32];
    for (int f = 0; f < 3; ++f)
      std::snprintf(h[f], sizeof h[f], "[%zu] %s", k + 1, f == 0 ? "t/r" : f == 1 ? "x" : "ms");
    std::fprintf(out, " | %8s %8s %8s", h[0], h[1], h[2]);
  }
  std::fprintf(out, "\n");
  auto row = [&](const std::string& name, const std::string& field) {
    const json& first = field.empty() ? reports[0]["categories"][name] : reports[0][field];
    std::fprintf(out, "%-18s %8.0f",
                 (field.empty()    ? name
                  : field == "all" ? "pooled"
                                   : "mean of categories")
                     .c_str(),
                 first.value("mean_prompt_tokens", std::nan("")));
    for (const json& r : reports) {
      const json& j = field.empty() ? r["categories"][name] : r[field];
      std::fprintf(out, " | %8.2f %7.2fx %8.2f", j["mean_accepted_length"].get<double>(),
                   j["speedup"].get<double>(), j["draft_ms_per_round"].get<double>());
    }
    std::fprintf(out, "\n");
  };
  for (const auto& c : reports[0]["category_order"]) row(c.get<std::string>(), "");
  row("", "mean_over_categories");
  row("", "all");
}

std::string spec_bench_plot(const std::vector<json>& reports) {
  struct Figure {
    const char *field, *title, *y_label;
  };
  const Figure figures[] = {{"mean_accepted_length", "Tokens per round", "tokens per round"},
                            {"speedup", "Speedup over plain decoding", "speculative / plain tok/s"},
                            {"draft_ms_per_round", "Drafting round", "ms per round that drafted"}};
  std::vector<PlotPanel> panels;
  for (const Figure& f : figures) {
    PlotPanel p;
    p.title = f.title;
    p.x_label = "mean prompt length of the category (tokens)";
    p.y_label = f.y_label;
    for (const json& r : reports) {
      // Points in the order of their x, so that the line runs left to right.
      std::vector<std::pair<double, double>> pts;
      for (const auto& c : r["category_order"]) {
        const json& j = r["categories"][c.get<std::string>()];
        pts.emplace_back(std::max(1.0, j["mean_prompt_tokens"].get<double>()),
                         j[f.field].get<double>());
      }
      std::sort(pts.begin(), pts.end());
      PlotSeries s;
      s.name = r["label"].get<std::string>();
      for (const auto& [x, y] : pts) {
        s.x.push_back(x);
        s.y.push_back(y);
      }
      p.series.push_back(std::move(s));
    }
    panels.push_back(std::move(p));
  }
  const json& r0 = reports.at(0);
  char title[256];
  std::snprintf(title, sizeof title, "dspark bench spec: %s, T = %g, %d drafts, %s",
                r0["model"].get<std::string>().c_str(), r0["temperature"].get<double>(),
                r0["num_speculative_tokens"].get<int>(), r0["dtype"].get<std::string>().c_str());
  return svg_plot(title, panels);
}

SpecOutputsFile::SpecOutputsFile(const std::string& path) : path_(path) {
  errno = 0;
  out_.open(path, std::ios::out | std::ios::trunc);
  if (!out_)
    fail("flag --outputs: cannot write '", path, "'",
         errno ? std::string(": ") + std::strerror(errno) : std::string());
}

void SpecOutputsFile::write(const SpecPromptRun& r, const SpecBenchSetup& s) {
  json j;
  j["method"] = s.label;
  if (!r.prompt->question_id.is_null()) j["question_id"] = r.prompt->question_id;
  j["category"] = r.prompt->category;
  j["prompt"] = r.prompt->text;
  j["prompt_tokens"] = r.prompt_tokens;
  j["plain_text"] = r.plain_text;
  j["spec_text"] = r.spec_text;
  j["plain_tokens"] = r.plain_tokens.size();
  j["spec_tokens"] = r.spec_tokens.size();
  j["plain_token_ids"] = r.plain_tokens;
  j["spec_token_ids"] = r.spec_tokens;
  if (s.sampled) {
    j["identical"] = nullptr;
    j["identical_reason"] = kSampledIdenticalReason;
  } else {
    j["identical"] = r.plain_tokens == r.spec_tokens;
  }
  j["rounds"] = r.metrics.rounds;
  j["tokens_per_round"] = r.metrics.mean_accepted_length();
  j["verified_per_round"] =
      r.metrics.rounds ? double(r.metrics.drafted) / double(r.metrics.rounds) : 0.0;
  j["verify_length_hist"] = verify_length_hist(r.metrics, s.num_speculative_tokens);
  // Invalid UTF-8 in a random model's text is replaced rather than refused.
  out_ << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  out_.flush();
  if (!out_) fail("flag --outputs: writing '", path_, "' failed");
}

void SpecOutputsFile::close() {
  out_.close();
  if (!out_) fail("flag --outputs: writing '", path_, "' failed");
}

}  // namespace dspark
