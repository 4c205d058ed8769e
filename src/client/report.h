// Text reports of `dspark bench serve`: one run in the layout of `vllm bench serve`'s result
// table, and the sweep table (config x concurrency) with the goal ratios.
#pragma once

#include <cstdio>

#include <nlohmann/json.hpp>

namespace dspark {

// A run_load result.
void print_run_report(std::FILE* out, const nlohmann::json& run);
// A run_sweep result.
void print_sweep_report(std::FILE* out, const nlohmann::json& sweep);
// One line per sweep point as it completes (progress on stderr).
void print_point_line(std::FILE* out, const nlohmann::json& point);

}  // namespace dspark
