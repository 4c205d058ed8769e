#include "client/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/cpu.h"
#include "core/error.h"
#include "core/mmap_file.h"

namespace dspark {

namespace {

const nlohmann::json* find_point(const nlohmann::json& points, const std::string& config, int c) {
  for (const auto& p : points)
    if (p.value("config", "") == config && p.value("concurrency", -1) == c &&
        p.contains("output_throughput"))
      return &p;
  return nullptr;
}

double number_at(const nlohmann::json* p, const char* a, const char* b = nullptr) {
  if (!p || !p->is_object() || !p->contains(a)) return NAN;
  const nlohmann::json* v = &(*p)[a];
  if (b) {
    if (!v->is_object() || !v->contains(b)) return NAN;
    v = &(*v)[b];
  }
  return v->is_number() ? v->get<double>() : NAN;
}

nlohmann::json ratio(double a, double b) {
  return std::isfinite(a) && std::isfinite(b) && b > 0 ? nlohmann::json(a / b) : nlohmann::json();
}

}  // namespace

nlohmann::json demo_speculative_config() {
  nlohmann::json j = {{"model", "models/demo-dspark"},
                      {"method", "dspark"},
                      {"num_speculative_tokens", 8},
                      {"draft_sample_method", "probabilistic"},
                      {"rejection_sample_method", "block"}};
  if (cpu_features().avx512_bf16) j["quantization"] = "int8";
  return j;
}

std::vector<SweepConfig> default_sweep_configs(const nlohmann::json& spec) {
  nlohmann::json full = spec, adaptive = spec;
  full["enable_adaptive_verification"] = false;
  adaptive["enable_adaptive_verification"] = true;
  return {
      {"plain", std::nullopt, ""}, {"dspark-full", full, ""}, {"dspark-adaptive", adaptive, ""}};
}

std::vector<SweepConfig> parse_sweep_configs(const std::string& text, const std::string& what) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool inline_json = first != std::string::npos && text[first] == '[';
  const std::string body = inline_json ? text : read_text_file(text);
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_array() || j.empty())
    fail(what, ": expected a non-empty JSON array of {\"name\", \"speculative_config\"}");
  std::vector<SweepConfig> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    const std::string at = what + " entry " + std::to_string(i);
    if (!e.is_object()) fail(at, ": expected an object");
    for (const auto& [k, v] : e.items())
      if (k != "name" && k != "speculative_config" && k != "base_url")
        fail(at, ": unknown field '", k, "' (known: name, speculative_config, base_url)");
    if (!e.contains("name") || !e["name"].is_string() || e["name"].get<std::string>().empty())
      fail(at, ": field 'name' must be a non-empty string");
    SweepConfig c;
    c.name = e["name"].get<std::string>();
    for (const auto& o : out)
      if (o.name == c.name) fail(at, ": name '", c.name, "' appears twice");
    if (e.contains("speculative_config") && !e["speculative_config"].is_null()) {
      if (!e["speculative_config"].is_object())
        fail(at, ": field 'speculative_config' must be an object or null");
      c.speculative_config = e["speculative_config"];
    }
    if (e.contains("base_url")) {
      if (!e["base_url"].is_string()) fail(at, ": field 'base_url' must be a string");
      c.base_url = e["base_url"].get<std::string>();
      parse_server_url(c.base_url, at + " field 'base_url'");
    }
    out.push_back(std::move(c));
  }
  return out;
}

namespace {
// A config's server, started or given, and the load options that reach it.
struct SweepTarget {
  nlohmann::json desc;
  LoadOptions load;
  std::unique_ptr<ServerProcess> server;
  bool ok() const { return !desc.contains("error"); }
};

SweepTarget open_target(const SweepOptions& o, const SweepConfig& cfg) {
  SweepTarget t;
  t.desc = {{"name", cfg.name}};
  t.desc["speculative_config"] =
      cfg.speculative_config ? *cfg.speculative_config : nlohmann::json();
  t.load = o.load;
  try {
    if (!cfg.base_url.empty()) {
      t.load.url = parse_server_url(cfg.base_url, "config " + cfg.name + " base_url");
      t.desc["base_url"] = cfg.base_url;
      if (t.load.model.empty()) t.load.model = first_served_model(t.load.url, t.load.api_key);
    } else {
      if (o.launch.model.empty())
        fail("config ", cfg.name, ": no base_url and no --model to start a server with");
      ServerLaunch l = o.launch;
      l.speculative_config = cfg.speculative_config ? cfg.speculative_config->dump() : "";
      std::fprintf(stderr, "bench serve: starting dspark serve for %s ...\n", cfg.name.c_str());
      t.server = std::make_unique<ServerProcess>(l);
      t.load.url = t.server->url();
      if (t.load.model.empty()) t.load.model = t.server->model_name();
      if (t.load.model.empty()) t.load.model = first_served_model(t.load.url, t.load.api_key);
      t.desc["server_command"] = t.server->command();
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench serve: config %s: %s\n", cfg.name.c_str(), e.what());
    t.desc["error"] = e.what();
  }
  return t;
}
}  // namespace

nlohmann::json run_sweep(const SweepOptions& o,
                         const std::function<void(const nlohmann::json&)>& on_point) {
  nlohmann::json out;
  out["concurrency"] = o.concurrency;
  out["rounds"] = o.rounds;
  out["configs"] = nlohmann::json::array();
  std::vector<std::string> names;
  // Every server first, side by side (an idle one takes no CPU), then each concurrency against
  // each config in turn: a point of one config is never minutes of machine drift away from the
  // same point of another.
  std::vector<SweepTarget> targets;
  for (const auto& cfg : o.configs) {
    names.push_back(cfg.name);
    targets.push_back(open_target(o, cfg));
  }
  nlohmann::json runs = nlohmann::json::array();
  // Round k starts with config k - 1 (mod their count): on a shared machine the order of two runs
  // seconds apart measured a bias of a few percent, which a fixed order would give to one config.
  const size_t n = targets.size();
  for (int round = 1; round <= o.rounds; ++round)
    for (int c : o.concurrency)
      for (size_t i = 0; i < n; ++i) {
        SweepTarget& t = targets[(i + size_t(round - 1)) % n];
        if (!t.ok()) continue;
        LoadOptions lo = t.load;
        lo.max_concurrency = c;
        lo.num_prompts = std::max(o.min_prompts, 2 * c);
        nlohmann::json p;
        try {
          p = run_load(lo);
        } catch (const Error& e) {  // the server stopped serving: record it, go on
          p = {{"error", e.what()}};
        }
        p["config"] = t.desc["name"];
        p["concurrency"] = c;
        p["round"] = round;
        if (on_point) on_point(p);
        runs.push_back(p);
      }
  for (SweepTarget& t : targets) {
    if (t.server) t.desc["server_exit"] = t.server->stop();
    out["configs"].push_back(t.desc);
  }
  out["points"] = median_points(runs, names, o.concurrency);
  if (o.rounds > 1) out["runs"] = runs;
  out["ratios"] = sweep_ratios(out["points"], names, o.concurrency);
  return out;
}

nlohmann::json median_points(const nlohmann::json& runs, const std::vector<std::string>& configs,
                             const std::vector<int>& concurrency) {
  nlohmann::json points = nlohmann::json::array();
  for (const std::string& name : configs)
    for (int c : concurrency) {
      std::vector<const nlohmann::json*> rs;
      for (const auto& p : runs)
        if (p.value("config", "") == name && p.value("concurrency", 0) == c) rs.push_back(&p);
      if (rs.empty()) continue;
      std::vector<double> tps;
      for (const auto* p : rs) tps.push_back(p->value("output_throughput", 0.0));
      // The round of the median output tok/s (the lower middle one for an even count); a round
      // that failed sorts first.
      std::vector<size_t> order(rs.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return std::make_pair(!rs[a]->contains("error"), tps[a]) <
               std::make_pair(!rs[b]->contains("error"), tps[b]);
      });
      nlohmann::json p = *rs[order[(order.size() - 1) / 2]];
      if (rs.size() > 1) p["rounds_output_throughput"] = tps;
      points.push_back(std::move(p));
    }
  return points;
}

nlohmann::json sweep_ratios(const nlohmann::json& points, const std::vector<std::string>& configs,
                            const std::vector<int>& concurrency) {
  nlohmann::json r = nlohmann::json::object();
  bool any = false;
  for (const auto& p : points) any = any || p.contains("output_throughput");
  if (concurrency.empty() || !any) return r;
  const int lo = *std::min_element(concurrency.begin(), concurrency.end());
  const int hi = *std::max_element(concurrency.begin(), concurrency.end());
  auto has = [&](const std::string& n) {
    return std::find(configs.begin(), configs.end(), n) != configs.end();
  };
  auto tps = [&](const std::string& cfg, int c) {
    return number_at(find_point(points, cfg, c), "output_throughput");
  };
  auto ttft = [&](const std::string& cfg, int c) {
    return number_at(find_point(points, cfg, c), "ttft_ms", "median");
  };
  r["low_concurrency"] = lo;
  r["high_concurrency"] = hi;
  if (has("plain") && has("dspark-adaptive")) {
    nlohmann::json a = nlohmann::json::array();
    for (int c : concurrency)
      a.push_back(
          {{"concurrency", c}, {"ratio", ratio(tps("dspark-adaptive", c), tps("plain", c))}});
    r["adaptive_over_plain_tok_s"] = a;
  }
  if (has("dspark-full") && has("dspark-adaptive"))
    r["adaptive_over_full_tok_s_at_high"] =
        ratio(tps("dspark-adaptive", hi), tps("dspark-full", hi));
  if (lo == hi) return r;
  nlohmann::json scale = nlohmann::json::array(), t = nlohmann::json::array();
  for (const auto& cfg : configs) {
    if (cfg != "plain")
      scale.push_back({{"config", cfg}, {"ratio", ratio(tps(cfg, hi), tps(cfg, lo))}});
    t.push_back({{"config", cfg}, {"ratio", ratio(ttft(cfg, hi), ttft(cfg, lo))}});
  }
  r["tok_s_high_over_low"] = scale;
  r["median_ttft_high_over_low"] = t;
  return r;
}

std::vector<PlotPanel> sweep_panels(const nlohmann::json& sweep) {
  PlotPanel a, b;
  a.title = "Output throughput";
  a.x_label = b.x_label = "concurrency (max in-flight requests)";
  a.y_label = "output tok/s";
  b.title = "Median time to first token";
  b.y_label = "median TTFT (ms)";
  for (const auto& cfg : sweep["configs"]) {
    const std::string name = cfg.value("name", "");
    PlotSeries sa{name, {}, {}}, sb{name, {}, {}};
    for (const auto& c : sweep["concurrency"]) {
      const nlohmann::json* p = find_point(sweep["points"], name, c.get<int>());
      if (!p) continue;
      sa.x.push_back(c.get<double>());
      sb.x.push_back(c.get<double>());
      sa.y.push_back(number_at(p, "output_throughput"));
      sb.y.push_back(number_at(p, "ttft_ms", "median"));
    }
    a.series.push_back(sa);
    b.series.push_back(sb);
  }
  return {a, b};
}

}  // namespace dspark
