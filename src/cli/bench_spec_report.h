// `dspark bench spec`'s report: the figures per category, their mean over categories and the
// pooled run, the histogram of the verification lengths the policy chose, the per-prompt outputs
// file (--outputs), and for several speculative configs side by side, their table and plot.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_prompts.h"
#include "runtime/metrics.h"

namespace dspark {

// One prompt, run plain and speculatively.
struct SpecPromptRun {
  const BenchPrompt* prompt = nullptr;
  int64_t prompt_tokens = 0;  // the encoded prompt (chat template included)
  std::vector<int32_t> plain_tokens, spec_tokens;
  std::string plain_text, spec_text;
  double plain_seconds = 0, spec_seconds = 0;  // decode time of each side (after the first token)
  SpecMetrics metrics;                         // the speculative side's rounds
};

struct SpecBenchSetup {
  std::string model, method, verify_lengths, dtype;
  std::string drafter;  // the drafter's directory (empty for n-gram)
  std::string label;    // names the config in tables, plots and --outputs: the method, the drafter
                        // directory's name, "adaptive" where the policy chooses the lengths
  int num_speculative_tokens = 0, max_tokens = 0;
  double temperature = 0;
  bool sampled = false;  // T > 0: outputs are not compared token by token
};

// Why there is no identical count at T > 0.
inline constexpr const char* kSampledIdenticalReason =
    "sampled outputs differ by design; losslessness is a property of the distribution, proven by "
    "the chi-square tests (tests/spec_decode, SpecLossless.*)";

// Rounds that verified l drafts, l = 0..K, from SpecMetrics::verified_at (the rounds that
// verified more than i drafts): counts[0] are the plain steps, where the policy verified no
// draft (it skipped drafting, or chose length 0). Sums to m.rounds; sum of l * counts[l] is
// m.drafted.
std::vector<int64_t> verify_length_hist(const SpecMetrics& m, int K);

// The report as JSON: "categories" (by name) and "category_order" (file order),
// "mean_over_categories" (each category counts once), "all" (every prompt pooled) and
// "verify_length_hist" (counts and shares over the run).
nlohmann::json spec_bench_report(const std::vector<SpecPromptRun>& runs,
                                 const SpecBenchSetup& setup);

// The report as a table with footnotes and the histogram.
void print_spec_bench_report(const nlohmann::json& report, std::FILE* out);

// Several reports (one per speculative config, over the same prompts and plain runs) side by
// side: per category, each config's tokens per round, speedup and drafting round.
void print_spec_bench_comparison(const std::vector<nlohmann::json>& reports, std::FILE* out);

// The reports as an SVG plot of three panels, tokens per round, speedup and drafting round (ms),
// each against the categories' mean prompt length in tokens (log2 axis), one series per report.
// Meant for prompt sets whose categories are length buckets (scripts/make_long_prompts.py).
std::string spec_bench_plot(const std::vector<nlohmann::json>& reports);

// The per-prompt JSONL file of --outputs: opened (or refused, naming the flag and the path)
// before any work, one line written and flushed per prompt.
class SpecOutputsFile {
 public:
  explicit SpecOutputsFile(const std::string& path);
  void write(const SpecPromptRun& run, const SpecBenchSetup& setup);
  void close();  // throws Error, naming the flag and path, if any write failed

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace dspark
