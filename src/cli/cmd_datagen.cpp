// dspark datagen: drafter training data. `regenerate` has the target answer prompts (continuous
// batching); `hidden` stores the target's hidden states for the regenerated sequences.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/crc32.h"
#include "core/error.h"
#include "datagen/hidden.h"
#include "datagen/hidden_dataset.h"
#include "datagen/prompts.h"
#include "datagen/regenerate.h"
#include "spec_decode/drafter_config.h"

namespace dspark {

namespace {

namespace fs = std::filesystem;

std::string abs_path(const std::string& p) { return fs::weakly_canonical(fs::absolute(p)).string(); }

int64_t limit_flag(const Args& args) {
  if (!args.on("limit")) return -1;
  return args.integer("limit", 0, kFlagInt64Max);
}

int regenerate_cmd(int argc, char** argv) {
  Args args;
  args.flag("model", "target model directory (config.json, safetensors, tokenizer.json)")
      .flag("out", "output JSONL (appended to; a rerun resumes)")
      .flag("corpus", "corpus directory: prompts are the user turns of instructions/<split>.jsonl")
      .flag("prompts", "JSONL of {\"prompt\": ...} or {\"turns\": [...]} records (e.g. a corpus' prompts/<domain>.jsonl)")
      .flag("split", "corpus split for --corpus", true, "train")
      .flag("limit", "answer only the first N prompts of the source (counted in total, resumed runs included)")
      .flag("sample", "answer N prompts spread evenly over the source instead of the first N (the source's "
                      "kinds in their proportions when it is grouped by kind; deterministic, so a rerun resumes)")
      .flag("max-tokens", "response tokens at most per turn", true, "384")
      .flag("batch", "prompts generated at once (continuous batching)", true, "16")
      .flag("no-progress", "no progress bar on stderr", false);
  // The recipe's sampling (Qwen3's recommended settings); prompt p samples from stream (seed, p's id).
  SamplingParams recipe;
  recipe.temperature = 0.7f;
  recipe.top_p = 0.8f;
  recipe.top_k = 20;
  add_sampling_flags(args, recipe);
  add_runtime_flags(args);
  args.parse(argc, argv);
  if (args.help_requested()) {
    std::cout << args.usage("datagen regenerate",
                            "Has the target answer prompts by sampling and writes one JSONL record per prompt:\n"
                            "{\"id\", \"input_ids\" (prompt + response), \"loss_mask\" (1 on the response), "
                            "\"prompt_tokens\", \"finish_reason\"}.\n"
                            "Records come in prompt order; rerunning resumes where an interrupted run stopped.\n"
                            "Output is independent of --batch with --dtype f32 (and with bf16 for --batch <= 16\n"
                            "on the AVX2 kernels).");
    return 0;
  }
  const DType dtype = apply_runtime_flags(args);
  const std::string dir = args.str("model");
  const std::string out = args.str("out");
  if (args.on("corpus") == args.on("prompts")) fail("give exactly one of --corpus and --prompts");

  datagen::RegenOptions opt;
  opt.sampling = sampling_from_flags(args);
  opt.max_tokens = int(args.integer("max-tokens", 1, kFlagIntMax));
  opt.batch = int(args.integer("batch", 1, 4096));
  opt.limit = limit_flag(args);
  opt.progress = !args.on("no-progress");

  std::vector<datagen::RegenPrompt> prompts;
  nlohmann::json source;
  if (args.on("corpus")) {
    prompts = datagen::load_corpus_prompts(args.str("corpus"), args.str("split"));
    source = {{"corpus", abs_path(args.str("corpus"))}, {"split", args.str("split")}};
  } else {
    prompts = datagen::load_prompt_file(args.str("prompts"));
    source = {{"prompts", abs_path(args.str("prompts"))}};
  }
  if (args.on("sample")) {
    if (args.on("limit")) fail("give at most one of --limit and --sample");
    const int64_t n = args.integer("sample", 1, kFlagInt64Max);
    prompts = datagen::spread_sample(std::move(prompts), n);
    source["sample"] = n;  // part of the settings: resuming with another sample is refused
  }
  auto tok = Tokenizer::from_dir(dir);
  auto model = Model::load(dir, LoadOptions{dtype});
  opt.settings = {{"model", abs_path(dir)},
                  {"config_crc32", datagen::crc32_hex(crc32_file((fs::path(dir) / "config.json").string()))},
                  {"tokenizer_crc32", datagen::crc32_hex(crc32_file((fs::path(dir) / "tokenizer.json").string()))},
                  {"dtype", dtype_name(dtype)},
                  {"source", source},
                  {"max_tokens", opt.max_tokens},
                  {"temperature", args.number("temperature", 0, 1e6)},
                  {"top_p", args.number("top-p", 0, 1)},
                  {"top_k", opt.sampling.top_k},
                  {"min_p", args.number("min-p", 0, 1)},
                  {"seed", opt.sampling.seed}};
  const datagen::RegenStats st = datagen::regenerate(*model, *tok, prompts, out, opt);
  const double tok_s = st.seconds > 0 ? double(st.response_tokens) / st.seconds : 0;
  std::printf("regenerate: %lld prompts in range, %lld already done, %lld generated; %lld response tokens in %.2f s "
              "(%.1f tok/s, %lld forward passes)%s\n",
              (long long)st.prompts, (long long)st.already_done, (long long)st.generated,
              (long long)st.response_tokens, st.seconds, tok_s, (long long)st.forwards,
              st.dropped_partial_line ? "; a partial last line was dropped" : "");
  return 0;
}

int hidden_cmd(int argc, char** argv) {
  Args args;
  args.flag("model", "target model directory")
      .flag("data", "regenerated JSONL (dspark datagen regenerate)")
      .flag("layers", "target layers to store, 0-based decoder-layer outputs (e.g. 1,3,4; -1: embeddings)")
      .flag("drafter", "take the layers from this drafter's config.json (target_layer_ids)")
      .flag("out", "output directory (resumable)")
      .flag("shard-size", "samples per shard directory", true, "256")
      .flag("max-batch-tokens", "tokens per forward pass at most (sequences are packed)", true, "2048")
      .flag("limit", "only the first N records")
      .flag("no-progress", "no progress bar on stderr", false);
  add_runtime_flags(args);
  args.parse(argc, argv);
  if (args.help_requested()) {
    std::cout << args.usage("datagen hidden",
                            "Runs the target over each regenerated sequence and writes, per sequence,\n"
                            "DIR/shard-NNNNN/sample-NNNNNN.safetensors: hidden_states [T, n_layers + 1, H] bf16\n"
                            "(the chosen layers' outputs, then the final-normed hidden state), token_ids [T] I64,\n"
                            "loss_mask [T] U8; and DIR/manifest.json, written last. Rerunning resumes and\n"
                            "recomputes missing or damaged samples.");
    return 0;
  }
  const DType dtype = apply_runtime_flags(args);
  const std::string dir = args.str("model");
  if (args.on("layers") == args.on("drafter")) fail("give exactly one of --layers and --drafter");
  datagen::HiddenOptions opt;
  opt.layer_ids = args.on("layers") ? args.int_list("layers", -1, 1 << 20)
                                    : DrafterConfig::load(args.str("drafter")).target_layer_ids;
  opt.shard_size = int(args.integer("shard-size", 1, 1000000));
  opt.max_batch_tokens = int(args.integer("max-batch-tokens", 1, 1 << 20));
  opt.limit = limit_flag(args);
  opt.progress = !args.on("no-progress");
  opt.target_path = abs_path(dir);
  opt.target_config_crc32 = datagen::crc32_hex(crc32_file((fs::path(dir) / "config.json").string()));
  auto model = Model::load(dir, LoadOptions{dtype});
  const datagen::HiddenStats st = datagen::extract_hidden(*model, abs_path(args.str("data")), args.str("out"), opt);
  std::printf("hidden: %lld samples in range, %lld already done, %lld written (%lld repaired); %lld tokens in %.2f s "
              "(%.1f tok/s, %lld forward passes)\n",
              (long long)st.samples, (long long)st.skipped, (long long)st.written, (long long)st.repaired,
              (long long)st.tokens, st.seconds, st.seconds > 0 ? double(st.tokens) / st.seconds : 0.0,
              (long long)st.forwards);
  return 0;
}

}  // namespace

int cmd_datagen(int argc, char** argv) {
  const char* usage =
      "usage: dspark datagen <regenerate|hidden> [flags]   (--help after each for its flags)\n\n"
      "  regenerate  the target answers prompts (batched sampling) -> JSONL of input_ids / loss_mask\n"
      "  hidden      the target's hidden states for those sequences -> safetensors samples + manifest\n";
  if (argc < 1 || !std::strcmp(argv[0], "--help") || !std::strcmp(argv[0], "-h")) {
    std::fputs(usage, argc < 1 ? stderr : stdout);
    return argc < 1 ? 2 : 0;
  }
  const std::string sub = argv[0];
  if (sub == "regenerate") return regenerate_cmd(argc - 1, argv + 1);
  if (sub == "hidden") return hidden_cmd(argc - 1, argv + 1);
  std::fprintf(stderr, "dspark datagen: unknown subcommand '%s'\n\n%s", sub.c_str(), usage);
  return 2;
}

}  // namespace dspark
