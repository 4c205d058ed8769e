// The concurrency sweep of `dspark bench serve --sweep`: for each serving configuration (plain
// decoding, DSpark with full blocks, DSpark with the adaptive verification length, by default) a
// server is started (or a given one is used), all of them before the first point; then each
// concurrency runs against every config in turn, `rounds` times (round k starting with config k -
// 1, so that no config always runs first), in one process, so that all points are measured side by
// side. Then the ratios the serving goals are stated in.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/load_run.h"
#include "client/server_process.h"
#include "client/svg_plot.h"

namespace dspark {

struct SweepConfig {
  std::string name;
  std::optional<nlohmann::json> speculative_config;  // none: plain decoding
  std::string base_url;  // a running server instead of starting one ("" : start one)
};

// The demo's DSpark config (Makefile DEMO_SPEC): models/demo-dspark, 8-token blocks, probabilistic
// drafting, block verification, int8 drafter weights where the CPU has AVX512-BF16.
nlohmann::json demo_speculative_config();
// plain, dspark-full and dspark-adaptive from a DSpark config (enable_adaptive_verification set
// false and true on it).
std::vector<SweepConfig> default_sweep_configs(const nlohmann::json& spec);
// Reads --sweep-configs: a JSON array (inline, or the path of a file holding it) of
// {"name", "speculative_config": {...} | null, "base_url"?}. Throws Error naming `what`.
std::vector<SweepConfig> parse_sweep_configs(const std::string& text, const std::string& what);

struct SweepOptions {
  std::vector<SweepConfig> configs;
  std::vector<int> concurrency;  // e.g. 1, 2, 4, 8, 16
  int min_prompts = 0;           // each point sends max(min_prompts, 2 x concurrency) requests
  int rounds = 1;                // each point this many times; the median tok/s round is reported
  LoadOptions load;              // everything else of a run (url and model are set per config)
  ServerLaunch launch;           // how servers are started (speculative_config set per config)
};

// Runs every point; `on_point` sees each point's result as it completes (for progress output).
// Returns {"configs": [...], "concurrency": [...], "rounds": N, "points": [...], "ratios": {...}}
// and with several rounds "runs" (every round's point); each point is a run_load result plus
// "config", "concurrency" and "round". A config whose server fails to start is recorded with its
// error and the sweep goes on.
nlohmann::json run_sweep(const SweepOptions& o,
                         const std::function<void(const nlohmann::json&)>& on_point);

// One point per config and concurrency from the rounds' points: the round whose output tok/s is
// the median (the lower middle one for an even count; failed rounds count as the slowest), with
// "rounds_output_throughput" (every round's, in order) when there are several.
nlohmann::json median_points(const nlohmann::json& runs, const std::vector<std::string>& configs,
                             const std::vector<int>& concurrency);

// The goal ratios from the points, when the configs plain, dspark-full and dspark-adaptive are
// present: adaptive/plain tok/s at each concurrency (a list of {concurrency, ratio}), adaptive/full
// tok/s at the highest, tok/s at the highest over the lowest concurrency for each DSpark config,
// and median TTFT at the highest over the lowest for every config.
nlohmann::json sweep_ratios(const nlohmann::json& points, const std::vector<std::string>& configs,
                            const std::vector<int>& concurrency);

// The two panels of the sweep plot: output tok/s and median TTFT against concurrency.
std::vector<PlotPanel> sweep_panels(const nlohmann::json& sweep);

}  // namespace dspark
