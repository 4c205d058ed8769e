// dspark calibrate: Sequential Temperature Scaling of a DSpark drafter's confidence head from
// real speculative decoding on held-out prompts; the temperatures go into its config.json.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/bench_prompts.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/mmap_file.h"
#include "model/forward.h"
#include "runtime/spec_generate.h"
#include "spec_decode/calibration.h"
#include "spec_decode/drafter.h"
#include "spec_decode/verify_length.h"
#include "tokenizer/tokenizer.h"

namespace dspark {

int cmd_calibrate(int argc, char** argv) {
  Args args;
  args.flag("model", "target model directory or GGUF file")
      .flag("drafter", "DSpark drafter directory (its config.json receives the temperatures)")
      .flag("prompts", "held-out prompts, JSONL with a \"prompt\" string or \"turns\" list")
      .flag("limit", "prompts to use (0: all)", true, "64")
      .flag("temperature", "sampling temperature of the runs", true, "1")
      .flag("draft-sample", "greedy or probabilistic", true, "probabilistic")
      .flag("rejection", "standard or block", true, "standard")
      .flag("seed", "random seed", true, "0")
      .flag("dry-run", "report only; do not write the temperatures", false)
      .flag("json", "print the report as JSON", false);
  add_length_flags(args, "128");
  add_runtime_flags(args);
  if (!args.parse(argc, argv, "calibrate",
                  "Runs real speculative decoding with a DSpark drafter on held-out prompts, fits\n"
                  "per-position confidence temperatures by Sequential Temperature Scaling (each chosen,\n"
                  "left to right, to minimise the ECE of the cumulative product), stores them in the\n"
                  "drafter's config.json, and reports per-position ECE before and after and the AUROC."))
    return 0;
  const LoadOptions load = apply_runtime_flags(args);
  const DType dtype = load.dtype;
  const std::string target_dir = args.str("model"), drafter_dir = args.str("drafter");
  const std::string draft_sample = args.str("draft-sample"), rejection = args.str("rejection");
  if (draft_sample != "greedy" && draft_sample != "probabilistic")
    fail("flag --draft-sample must be greedy or probabilistic, got '", draft_sample, "'");
  if (rejection != "standard" && rejection != "block")
    fail("flag --rejection must be standard or block, got '", rejection, "'");
  GenerateParams gp;
  length_from_flags(args, gp);
  gp.sampling.temperature = float(args.number("temperature", 0, 1e6));
  validate_flag_params(gp);
  const int64_t limit = args.integer("limit", 0, kFlagInt64Max);
  const uint64_t seed = uint64_t(args.integer("seed", 0, kFlagInt64Max));
  auto tok = Tokenizer::from_dir(target_dir);
  auto model = Model::load(target_dir, load);
  const ModelConfig& cfg = model->config();
  nlohmann::json spec_json = {{"method", "dspark"}, {"model", drafter_dir}, {"draft_sample_method", draft_sample},
                              {"rejection_sample_method", rejection}};
  SpecConfig spec = SpecConfig::parse(spec_json.dump());
  auto drafter = load_drafter(spec, *model, dtype);
  if (!drafter->has_confidence()) fail(drafter_dir, ": the drafter has no confidence head to calibrate");
  const int K = spec.num_speculative_tokens;

  // Prompts (the first turn of each line, as bench spec reads them).
  std::vector<std::string> prompts;
  for (BenchPrompt& p : read_prompts(args.str("prompts"), int(std::min<int64_t>(limit, kFlagIntMax))))
    prompts.push_back(std::move(p.text));
  gp.stop_token_ids = cfg.eos_token_ids;
  const ChatFormat fmt = detect_chat_format(*tok);
  for (int32_t id : chat_stop_tokens(*tok, fmt)) gp.stop_token_ids.push_back(id);
  KvCache kv(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, dtype, 1 << 16);
  Forward fwd(*model, kv);
  FullBlockPolicy full;  // every position verified, so every position gets labels
  SpecMetrics m;
  m.record_rounds = true;
  for (size_t i = 0; i < prompts.size(); ++i) {
    gp.sampling.seed = seed * 1000003ull + i;
    auto ids = tok->encode(apply_chat_template(fmt, {{"user", prompts[i]}}, true));
    try {
      spec_generate(fwd, *tok, ids, gp, *drafter, spec, full, m);
    } catch (const Error& e) {
      fail(args.str("prompts"), ": prompt ", i + 1, ": ", e.what());
    }
    std::fprintf(stderr, "calibrate: %zu/%zu prompts, %zu rounds\r", i + 1, prompts.size(), m.round_records.size());
  }
  std::fprintf(stderr, "\n");
  CalibrationReport rep = fit_sequential_temperature_scaling(m.round_records, K);
  nlohmann::json out = {{"rounds", m.round_records.size()},
                        {"temperatures", rep.temperatures},
                        {"ece_before", rep.ece_before},
                        {"ece_after", rep.ece_after},
                        {"samples_per_position", rep.samples},
                        {"auroc_before", rep.auroc_before},
                        {"auroc_after", rep.auroc_after},
                        {"mean_accepted_length", m.mean_accepted_length()}};
  if (!args.on("dry-run")) {
    const std::string path = (std::filesystem::path(drafter_dir) / "config.json").string();
    auto j = nlohmann::json::parse(read_text_file(path));
    j["sts_temperatures"] = rep.temperatures;
    const std::string text = j.dump(2) + "\n";
    write_file_atomic(path, text.data(), text.size());
    out["written_to"] = path;
  }
  if (args.on("json")) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%-9s %8s %11s %11s %9s\n", "position", "rounds", "ECE before", "ECE after", "T");
  for (int k = 0; k < K; ++k)
    std::printf("%-9d %8d %10.2f%% %10.2f%% %9.3f\n", k + 1, rep.samples[size_t(k)], 100 * rep.ece_before[size_t(k)],
                100 * rep.ece_after[size_t(k)], rep.temperatures[size_t(k)]);
  std::printf("AUROC %.3f before, %.3f after (scaling keeps the order within a position)\n", rep.auroc_before,
              rep.auroc_after);
  if (out.contains("written_to")) std::printf("temperatures written to %s\n", out["written_to"].get<std::string>().c_str());
  return 0;
}

}  // namespace dspark
