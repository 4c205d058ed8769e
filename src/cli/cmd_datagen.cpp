// dspark datagen: drafter training data. `regenerate` has the target answer prompts (continuous
// batching); `hidden` stores the target's hidden states for the regenerated sequences.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/crc32.h"
#include "core/error.h"
#include "core/gguf.h"
#include "datagen/hidden.h"
#include "datagen/hidden_dataset.h"
#include "datagen/ngram_overlap.h"
#include "datagen/prompt_mix.h"
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
  args.flag("model", "target model: an HF directory (config.json, safetensors, tokenizer.json) or a GGUF file")
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
  add_response_format_flag(args);
  // The recipe's sampling (Qwen3's recommended settings); prompt p samples from stream (seed, p's id).
  SamplingParams recipe;
  recipe.temperature = 0.7f;
  recipe.top_p = 0.8f;
  recipe.top_k = 20;
  add_sampling_flags(args, recipe);
  add_runtime_flags(args);
  if (!args.parse(argc, argv, "datagen regenerate",
                  "Has the target answer prompts by sampling and writes one JSONL record per prompt:\n"
                  "{\"id\", \"input_ids\" (prompt + response), \"loss_mask\" (1 on the response), "
                  "\"prompt_tokens\", \"finish_reason\"}.\n"
                  "Records come in prompt order; rerunning resumes where an interrupted run stopped.\n"
                  "Output is independent of --batch with --dtype f32 (and with bf16 for --batch <= 16\n"
                  "on the AVX2 kernels). --response-format constrains every answer as the API does, for\n"
                  "a drafter that serves structured output."))
    return 0;
  const LoadOptions load = apply_runtime_flags(args);
  const DType dtype = load.dtype;
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
  auto model = Model::load(dir, load);
  // The files that decide what is generated (a GGUF file holds config and tokenizer both: its
  // one checksum, read once, stands for both).
  const auto gguf = find_gguf(dir);
  const std::string config_crc = crc32_hex(crc32_file(gguf ? *gguf : (fs::path(dir) / "config.json").string()));
  const std::string tokenizer_crc = gguf ? config_crc : crc32_hex(crc32_file((fs::path(dir) / "tokenizer.json").string()));
  opt.settings = {{"model", abs_path(dir)},
                  {"config_crc32", config_crc},
                  {"tokenizer_crc32", tokenizer_crc},
                  {"dtype", dtype_name(dtype)},
                  {"source", source},
                  {"max_tokens", opt.max_tokens},
                  {"temperature", args.number("temperature", 0, 1e6)},
                  {"top_p", args.number("top-p", 0, 1)},
                  {"top_k", opt.sampling.top_k},
                  {"min_p", args.number("min-p", 0, 1)},
                  {"seed", opt.sampling.seed}};
  const nlohmann::json rf =
      response_format_from_flags(args, *tok, datagen::regen_stop_tokens(*tok, model->config()), opt.logits);
  if (!rf.is_null()) opt.settings["response_format"] = rf;
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
  args.flag("model", "target model directory or GGUF file")
      .flag("data", "regenerated JSONL (dspark datagen regenerate)")
      .flag("layers", "target layers to store, 0-based decoder-layer outputs (e.g. 1,3,4; -1: embeddings)")
      .flag("drafter", "take the layers from this drafter's config.json (target_layer_ids)")
      .flag("out", "output directory (resumable)")
      .flag("shard-size", "samples per shard directory", true, "256")
      .flag("max-batch-tokens", "tokens per forward pass at most (sequences are packed)", true, "2048")
      .flag("limit", "only the first N records")
      .flag("no-progress", "no progress bar on stderr", false);
  add_runtime_flags(args);
  if (!args.parse(argc, argv, "datagen hidden",
                  "Runs the target over each regenerated sequence and writes, per sequence,\n"
                  "DIR/shard-NNNNN/sample-NNNNNN.safetensors: hidden_states [T, n_layers + 1, H] bf16\n"
                  "(the chosen layers' outputs, then the final-normed hidden state), token_ids [T] I64,\n"
                  "loss_mask [T] U8; and DIR/manifest.json, written last. Rerunning resumes and\n"
                  "recomputes missing or damaged samples."))
    return 0;
  const LoadOptions load = apply_runtime_flags(args);
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
  opt.target_config_crc32 = crc32_hex(crc32_file((fs::path(dir) / "config.json").string()));
  auto model = Model::load(dir, load);
  const datagen::HiddenStats st = datagen::extract_hidden(*model, abs_path(args.str("data")), args.str("out"), opt);
  std::printf("hidden: %lld samples in range, %lld already done, %lld written (%lld repaired); %lld tokens in %.2f s "
              "(%.1f tok/s, %lld forward passes)\n",
              (long long)st.samples, (long long)st.skipped, (long long)st.written, (long long)st.repaired,
              (long long)st.tokens, st.seconds, st.seconds > 0 ? double(st.tokens) / st.seconds : 0.0,
              (long long)st.forwards);
  return 0;
}


// A training prompt that shares an n-gram of this many words with an evaluation set is a copy.
constexpr const char* kDefaultNgram = "8";

datagen::NgramIndex eval_index(const Args& args, const std::string& flag) {
  datagen::NgramIndex index(int(args.integer("ngram", 3, 64)));
  for (const std::string& v : args.list(flag))  // comma-separated, the flag repeatable
    for (size_t a = 0; a <= v.size();) {
      const size_t b = std::min(v.find(',', a), v.size());
      if (b > a) datagen::add_eval_file(index, v.substr(a, b - a));
      a = b + 1;
    }
  return index;
}

int prompts_cmd(int argc, char** argv) {
  Args args;
  args.flag("corpus", "corpus directory (dspark corpus build): its train split is read")
      .flag("count", "prompts to write")
      .flag("seed", "seed of the mix", true, "1")
      .flag("out", "output JSONL ({\"kind\", \"prompt\"} or {\"kind\", \"turns\"} per line)")
      .flag("exclude", "comma-separated evaluation JSONL files: a prompt sharing an n-gram with them is "
                       "dropped and rebuilt (e.g. ../shared/data/spec_bench.jsonl,../shared/data/mt_bench.jsonl)")
      .flag("ngram", "words per n-gram for --exclude", true, kDefaultNgram);
  std::string kinds;
  for (const auto& k : datagen::prompt_mix_kinds())
    kinds += "  " + k.name + std::string(20 - std::min<size_t>(19, k.name.size()), ' ') +
             std::to_string(int(k.weight * 100 + 0.5)) + "%  " + k.what + "\n";
  if (!args.parse(argc, argv, "datagen prompts",
                  "Builds regeneration prompts of every kind a chat model gets from a corpus' train\n"
                  "split, shuffled so that any prefix is a mix; deterministic for a corpus, count\n"
                  "and seed. Feed the file to `datagen regenerate --prompts`. Kinds:\n" + kinds))
    return 0;
  const int64_t count = args.integer("count", 1, kFlagInt64Max);
  const uint64_t seed = uint64_t(args.integer("seed", 0, kFlagInt64Max));
  const std::string out = args.str("out");
  std::vector<datagen::MixedPrompt> mix = datagen::build_prompt_mix(args.str("corpus"), count, seed);
  int64_t dropped = 0;
  if (args.opt("exclude")) {
    const datagen::NgramIndex index = eval_index(args, "exclude");
    // A copy is replaced by a prompt of a later seed, so the count holds and the file stays
    // deterministic.
    std::vector<datagen::MixedPrompt> spare;
    uint64_t spare_seed = seed;
    for (auto& p : mix) {
      const auto hit = [&](const datagen::MixedPrompt& q) {
        for (const std::string& t : q.prompt.turns)
          if (index.find(t, nullptr, nullptr)) return true;
        return false;
      };
      while (hit(p)) {
        ++dropped;
        for (;;) {
          if (spare.empty()) spare = datagen::build_prompt_mix(args.str("corpus"), 64, ++spare_seed + (uint64_t(1) << 40));
          datagen::MixedPrompt q = std::move(spare.back());
          spare.pop_back();
          if (q.kind != p.kind) continue;
          q.prompt.id = p.prompt.id;
          p = std::move(q);
          break;
        }
      }
    }
  }
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  if (!f) fail(out, ": cannot be written (--out)");
  for (const auto& p : mix) f << datagen::prompt_mix_line(p) << '\n';
  f.close();
  if (!f) fail(out, ": write failed (--out)");
  std::map<std::string, int64_t> per_kind;
  for (const auto& p : mix) ++per_kind[p.kind];
  std::printf("prompts: %lld written to %s (%lld replaced for sharing an n-gram with --exclude)\n",
              (long long)mix.size(), out.c_str(), (long long)dropped);
  for (const auto& [k, n] : per_kind) std::printf("  %-20s %lld\n", k.c_str(), (long long)n);
  return 0;
}

int overlap_cmd(int argc, char** argv) {
  Args args;
  args.flag("prompts", "training prompts JSONL ({\"prompt\"} / {\"turns\"} records)")
      .flag("against", "comma-separated evaluation JSONL files (every string field is indexed)")
      .flag("ngram", "words per n-gram", true, kDefaultNgram)
      .flag("show", "overlapping prompts to print at most", true, "10");
  if (!args.parse(argc, argv, "datagen overlap",
                  "Exit status 1 when a training prompt shares an n-gram of --ngram words\n"
                  "(lower-cased, punctuation ignored) with the evaluation sets; 0 when none does."))
    return 0;
  const datagen::NgramIndex index = eval_index(args, "against");
  const auto prompts = datagen::load_prompt_file(args.str("prompts"));
  const int64_t show = args.integer("show", 0, kFlagInt64Max);
  int64_t hits = 0;
  for (const auto& p : prompts)
    for (const std::string& t : p.turns) {
      std::string gram, label;
      if (!index.find(t, &gram, &label)) continue;
      if (hits++ < show)
        std::printf("prompt %lld shares \"%s\" with %s\n", (long long)p.id, gram.c_str(), label.c_str());
      break;
    }
  std::printf("overlap: %lld of %lld prompts share a %d-word n-gram with %zu indexed n-grams\n",
              (long long)hits, (long long)prompts.size(), index.n(), index.size());
  return hits ? 1 : 0;
}

}  // namespace

int cmd_datagen(int argc, char** argv) {
  static const Subcommand kWhat[] = {
      {"prompts", "regeneration prompts of every kind a chat model gets, from a corpus' train split", prompts_cmd},
      {"overlap", "exit 1 when training prompts share a long n-gram with evaluation sets", overlap_cmd},
      {"regenerate", "the target answers prompts (batched sampling) -> JSONL of input_ids / loss_mask", regenerate_cmd},
      {"hidden", "the target's hidden states for those sequences -> safetensors samples + manifest", hidden_cmd},
  };
  return run_subcommand("dspark datagen", kWhat, argc, argv);
}

}  // namespace dspark
