// Reading Prometheus text exposition format (what GET /metrics returns): the samples, each a
// metric name, its labels and a value. Comment lines (# HELP, # TYPE) are skipped.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace dspark {

struct PromSample {
  std::string name;                           // e.g. vllm:spec_decode_num_drafts_total
  std::map<std::string, std::string> labels;  // label values unescaped
  double value = 0;
};

// Parses the whole text. A malformed line throws Error naming its line number.
std::vector<PromSample> parse_prom_text(const std::string& text);

// The sum of the values of every sample named `name` whose labels include all of `match`
// (e.g. {{"model_name", "demo"}}); 0 when there is none.
double prom_sum(const std::vector<PromSample>& samples, const std::string& name,
                const std::map<std::string, std::string>& match = {});
// Whether any sample is named `name`.
bool prom_has(const std::vector<PromSample>& samples, const std::string& name);

}  // namespace dspark
