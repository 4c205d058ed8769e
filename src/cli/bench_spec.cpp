#include "cli/bench_spec.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "cli/bench_prompts.h"
#include "cli/bench_spec_report.h"
#include "cli/common.h"
#include "cli/flag_files.h"
#include "core/error.h"
#include "model/forward.h"
#include "runtime/context_limit.h"
#include "runtime/generate.h"
#include "runtime/spec_generate.h"
#include "spec_decode/drafter.h"
#include "spec_decode/verify_length.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

namespace {

// One speculative config of the run, with its drafter, its verification length policy and its runs.
struct SpecArm {
  SpecConfig spec;
  std::unique_ptr<Drafter> drafter;
  std::unique_ptr<VerifyLengthPolicy> policy;
  SpecBenchSetup setup;
  std::vector<SpecPromptRun> runs;
};

// --speculative-config: one JSON object, or an array of them run side by side.
std::vector<SpecConfig> spec_configs_from_flag(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) return {SpecConfig::parse(text)};  // an object, or its parse error
  if (j.empty()) fail("flag --speculative-config: the array holds no config");
  std::vector<SpecConfig> out;
  for (size_t i = 0; i < j.size(); ++i) {
    try {
      out.push_back(SpecConfig::parse(j[i].dump()));
    } catch (const Error& e) {
      fail("flag --speculative-config: config ", i + 1, " of ", j.size(), ": ", e.what());
    }
  }
  return out;
}

// The method, the drafter directory's last two path components, and how lengths are chosen.
std::string spec_label(const SpecConfig& spec) {
  std::string l = spec_method_name(spec.method);
  if (!spec.model.empty()) {
    std::filesystem::path p = std::filesystem::path(spec.model).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    const std::string parent = p.parent_path().filename().string();
    l += " (" + (parent.empty() ? "" : parent + "/") + p.filename().string() + ")";
  }
  if (spec.adaptive_verification)
    l += ", adaptive";
  else if (spec.confidence_threshold > 0)
    l += ", threshold";
  return l;
}

SpecBenchSetup arm_setup(const SpecConfig& spec, const std::string& model, const GenerateParams& gp,
                         DType dtype) {
  SpecBenchSetup setup;
  setup.model = model;
  setup.method = spec_method_name(spec.method);
  setup.drafter = spec.model;
  setup.label = spec_label(spec);
  setup.num_speculative_tokens = spec.num_speculative_tokens;
  setup.temperature = gp.sampling.temperature;
  setup.sampled = !gp.sampling.greedy();
  setup.verify_lengths = spec.adaptive_verification      ? "adaptive (prefix length policy)"
                         : spec.confidence_threshold > 0 ? "confidence threshold"
                                                         : "full block";
  setup.dtype = dtype_name(dtype);
  setup.max_tokens = gp.max_tokens;
  return setup;
}

std::vector<BenchPrompt> select_prompts(const Args& args) {
  const int limit = int(args.integer("limit", 0, kFlagIntMax));
  const int per_category = int(args.integer("per-category", 0, kFlagIntMax));
  if (per_category == 0) return read_prompts(args.str("prompts"), limit);
  std::vector<BenchPrompt> prompts =
      first_per_category(read_prompts(args.str("prompts"), 0), per_category);
  if (limit > 0 && int(prompts.size()) > limit) prompts.resize(size_t(limit));
  return prompts;
}

void print_progress(size_t i, size_t n, const SpecPromptRun& r, const std::string& label,
                    bool several) {
  std::fprintf(
      stderr,
      "[%zu/%zu] %-14s plain %6.1f tok/s  spec %6.1f tok/s  %.2f tokens/round  %.2f "
      "verified/round%s%s\n",
      i + 1, n, r.prompt->category.c_str(), r.plain_tokens.size() / std::max(r.plain_seconds, 1e-9),
      r.spec_tokens.size() / std::max(r.spec_seconds, 1e-9), r.metrics.mean_accepted_length(),
      r.metrics.rounds ? double(r.metrics.drafted) / double(r.metrics.rounds) : 0.0,
      several ? "  " : "", several ? label.c_str() : "");
}

void report(const std::vector<SpecArm>& arms, bool json, const std::optional<std::string>& plot) {
  std::vector<nlohmann::json> reports;
  for (const SpecArm& a : arms) reports.push_back(spec_bench_report(a.runs, a.setup));
  if (plot) write_file(*plot, spec_bench_plot(reports), "plot");
  if (json) {
    std::cout << (reports.size() == 1 ? reports[0] : nlohmann::json{{"runs", reports}}).dump(2)
              << "\n";
    return;
  }
  for (const nlohmann::json& r : reports) {
    if (reports.size() > 1) std::printf("\n== %s ==\n", r["label"].get<std::string>().c_str());
    print_spec_bench_report(r, stdout);
  }
  if (reports.size() > 1) print_spec_bench_comparison(reports, stdout);
}

}  // namespace

int bench_spec(int argc, char** argv) {
  Args args;
  args.flag("model", "target model directory or GGUF file")
      .flag("speculative-config",
            "vLLM-style speculative config JSON, or a JSON array of them run side by side")
      .flag("prompts", "JSONL prompts (MT-Bench / Spec-Bench format, or dspark corpus prompts)")
      .flag("per-category", "use the first N prompts of each category, in file order (0: all)",
            true, "0")
      .flag("limit",
            "use the first K prompts (0: all); with --per-category, the first K of its selection",
            true, "0")
      .flag("outputs",
            "write one JSONL line per prompt and config: both texts and tokens, identical, rounds")
      .flag("plot",
            "write an SVG plot of tokens per round, speedup and drafting round per category "
            "against its mean prompt length (for the length buckets of "
            "scripts/make_long_prompts.py)")
      .flag("raw", "use the prompt text as is, without the chat template", false)
      .flag("json", "print JSON (several configs: {\"runs\": [one report per config]})", false);
  add_length_flags(args, "128");
  add_sampling_flags(args, SamplingParams{});
  add_penalty_flags(args);
  add_response_format_flag(args);
  add_runtime_flags(args);
  add_kv_cache_flag(args);
  if (!args.parse(
          argc, argv, "bench spec",
          "Runs every prompt plain, then speculatively with each config, in the same run, and\n"
          "reports, per category and over the run (the mean over categories and every prompt\n"
          "pooled): tok/s each way, speedup, tokens per round, drafts verified per round, and how\n"
          "many outputs are token-identical (at T = 0; n/a when sampling); then the histogram of\n"
          "the verification lengths chosen (0..K) and the cost of a drafting round relative to a\n"
          "target step. Several configs (a JSON array) share the plain runs and end with a table\n"
          "of them side by side. --per-category N selects the first N prompts of every category\n"
          "(Spec-Bench: 13, MT-Bench: 8); --limit K is applied after it, keeping the first K\n"
          "selected prompts in file order."))
    return 0;
  const LoadOptions load = apply_runtime_flags(args);
  const DType dtype = load.dtype;
  const DType kv_dtype = kv_cache_dtype_from_flag(args, dtype);
  const std::string dir = args.str("model");
  GenerateParams gp;
  length_from_flags(args, gp);
  gp.sampling = sampling_from_flags(args);
  gp.logits_params = penalties_from_flags(args);
  validate_flag_params(gp);
  std::optional<SpecOutputsFile> outputs;
  if (auto path = args.opt("outputs")) {
    if (path->empty()) fail("flag --outputs: expects a file path");
    outputs.emplace(*path);
  }
  const std::optional<std::string> plot = args.opt("plot");
  if (plot) check_writable(*plot, "plot");  // before the run, which may take many minutes
  const std::vector<BenchPrompt> prompts = select_prompts(args);
  auto tok = Tokenizer::from_dir(dir);
  auto model = Model::load(dir, load);
  const ModelConfig& cfg = model->config();
  std::vector<SpecArm> arms;
  for (SpecConfig& spec : spec_configs_from_flag(args.str("speculative-config"))) {
    SpecArm& a = arms.emplace_back();
    a.spec = std::move(spec);
    a.drafter = load_drafter(a.spec, *model, dtype);
    a.policy = make_verify_policy(a.spec, *model, kv_dtype);
    a.setup = arm_setup(a.spec, dir, gp, dtype);
  }
  std::set<std::string> labels;  // each config named once
  for (size_t k = 0; k < arms.size(); ++k)
    if (!labels.insert(arms[k].setup.label).second)
      arms[k].setup.label += " #" + std::to_string(k + 1);
  gp.stop_token_ids = cfg.eos_token_ids;
  const bool raw = args.on("raw");
  std::optional<ChatFormat> fmt;
  if (!raw) {
    fmt = detect_chat_format(*tok);
    for (int32_t id : chat_stop_tokens(*tok, *fmt)) gp.stop_token_ids.push_back(id);
  }
  response_format_from_flags(args, *tok, gp.stop_token_ids, gp.logits_params);
  KvCache kv(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, kv_dtype, 1 << 16);
  Forward fwd(*model, kv);
  // Every prompt is encoded and checked against the length limit before any work.
  std::vector<std::vector<int32_t>> encoded;
  const int max_model_len = resolve_max_model_len(cfg, gp.max_model_len);
  for (size_t i = 0; i < prompts.size(); ++i) {
    encoded.push_back(
        raw ? tok->encode(prompts[i].text, true)
            : tok->encode(apply_chat_template(*fmt, {{"user", prompts[i].text}}, true)));
    try {
      check_prompt_length(int64_t(encoded.back().size()), max_model_len);
    } catch (const Error& e) {
      fail(args.str("prompts"), ": prompt ", i + 1, " (", prompts[i].category, "): ", e.what());
    }
  }
  if (!prompts.empty()) {
    // Warm-up, untimed: the first prompt once each way, so that one-off costs (the first touch of
    // the target's and the drafter's KV pages, about 0.15 s on the demo target) land in neither
    // side's figures. The prefix length policy may learn from this run's drafting time; it would
    // from the first timed prompt anyway.
    GenerateParams wp = gp;
    wp.max_tokens = std::min(gp.max_tokens, 32);
    generate(fwd, *tok, encoded[0], wp);
    for (SpecArm& a : arms) {
      SpecMetrics m;
      spec_generate(fwd, *tok, encoded[0], wp, *a.drafter, a.spec, *a.policy, m);
    }
  }
  const bool json = args.on("json");
  for (SpecArm& a : arms) a.runs.resize(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerateResult plain = generate(fwd, *tok, encoded[i], gp);
    for (SpecArm& a : arms) {
      SpecPromptRun& r = a.runs[i];
      r.prompt = &prompts[i];
      r.prompt_tokens = int64_t(encoded[i].size());
      GenerateResult sp =
          spec_generate(fwd, *tok, encoded[i], gp, *a.drafter, a.spec, *a.policy, r.metrics);
      r.plain_tokens = plain.tokens;
      r.plain_text = plain.text;
      r.plain_seconds = plain.decode_seconds;
      r.spec_tokens = std::move(sp.tokens);
      r.spec_text = std::move(sp.text);
      r.spec_seconds = sp.decode_seconds;
      if (outputs) outputs->write(r, a.setup);
      if (!json) print_progress(i, prompts.size(), r, a.setup.label, arms.size() > 1);
    }
  }
  if (outputs) outputs->close();
  report(arms, json, plot);
  return 0;
}

}  // namespace dspark
