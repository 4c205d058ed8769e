// dspark drafter: operations on trained drafters. `reduce-vocab` gives a drafter a reduced draft
// vocabulary (d2t / t2d) chosen from the token counts of its training data.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/common.h"
#include "core/error.h"
#include "datagen/regen_file.h"
#include "spec_decode/draft_vocab.h"

namespace dspark {

namespace {

int reduce_vocab_cmd(int argc, char** argv) {
  Args args;
  args.flag("model", "target model directory or GGUF file")
      .flag("drafter", "trained drafter directory (DSpark, DFlash or EAGLE-3); left unchanged")
      .flag("data",
            "the drafter's training data: regenerated JSONL (datagen regenerate), comma-separated "
            "for several")
      .flag("size", "draft vocabulary size (token ids kept)", true, "2048")
      .flag("out", "output drafter directory")
      .flag(
          "reduced-head",
          "keep only the draft vocabulary's head rows: every round, sampled ones too, drafts over "
          "them (smaller; EAGLE-3 drafters always get this form)",
          false)
      .flag("json", "print the report as JSON", false);
  if (!args.parse(argc, argv, "drafter reduce-vocab",
                  "Writes a copy of a drafter with a draft vocabulary of --size target ids (d2t / t2d, as in\n"
                  "Speculators' EAGLE-3 checkpoints): the target's stop tokens, then the ids most frequent in\n"
                  "the responses of its training data (then in its prompts). A DSpark / DFlash drafter keeps\n"
                  "its full head in the file, but every round, greedy or sampled, drafts over the draft\n"
                  "vocabulary (cheaper logits and Markov bias; sampled drafts have q = 0 outside it). With\n"
                  "--reduced-head (and always for EAGLE-3) the file keeps only the draft vocabulary's rows.\n"
                  "Verification is unchanged, so outputs keep the target's distribution exactly."))
    return 0;
  const std::string target_dir = args.str("model"), drafter_dir = args.str("drafter");
  const int64_t size = args.integer("size", 1, kFlagIntMax);
  auto model = Model::load(target_dir, LoadOptions{DType::F32});
  const ModelConfig& c = model->config();
  const int V = c.vocab_size;
  std::vector<int64_t> response(size_t(V), 0), prompt(size_t(V), 0);
  int64_t records = 0, response_tokens = 0;
  std::stringstream files(args.str("data"));
  for (std::string path; std::getline(files, path, ',');) {
    if (path.empty()) continue;
    const datagen::RegenFile f = datagen::read_regen_file(path);
    for (const datagen::RegenRecord& r : f.records) {
      ++records;
      for (size_t i = 0; i < r.input_ids.size(); ++i) {
        const int32_t t = r.input_ids[i];
        if (t < 0 || t >= V)
          fail(path, ": record ", r.id, " holds token id ", t,
               ", outside the target's vocabulary (", V, ")");
        (r.loss_mask[i] ? response : prompt)[size_t(t)] += 1;
        response_tokens += r.loss_mask[i] ? 1 : 0;
      }
    }
  }
  if (response_tokens == 0)
    fail("flag --data: no response tokens (loss_mask 1) in ", args.str("data"));
  const std::vector<uint8_t> allowed = drafter_head_mask(drafter_dir, V);
  std::vector<int32_t> always;
  for (int id : c.eos_token_ids)
    if (id >= 0 && id < V) always.push_back(id);
  const std::vector<int32_t> keep =
      choose_draft_vocab(response, prompt, allowed, always, int(size));
  write_reduced_drafter(drafter_dir, *model, keep, args.str("out"), args.on("reduced-head"));

  int64_t covered = 0, distinct = 0, distinct_kept = 0;
  std::vector<uint8_t> in(size_t(V), 0);
  for (int32_t t : keep) in[size_t(t)] = 1;
  for (int v = 0; v < V; ++v) {
    if (response[size_t(v)] == 0) continue;
    ++distinct;
    if (in[size_t(v)]) {
      ++distinct_kept;
      covered += response[size_t(v)];
    }
  }
  const double coverage = double(covered) / double(response_tokens);
  if (args.on("json")) {
    nlohmann::json j = {{"out", args.str("out")},
                        {"draft_vocab_size", keep.size()},
                        {"target_vocab_size", V},
                        {"records", records},
                        {"response_tokens", response_tokens},
                        {"distinct_response_tokens", distinct},
                        {"distinct_response_tokens_kept", distinct_kept},
                        {"response_token_coverage", coverage}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::printf(
        "%s: draft vocabulary of %zu of %d ids; it covers %.2f%% of the %lld response tokens of "
        "%lld records "
        "(%lld of %lld distinct ids)\n",
        args.str("out").c_str(), keep.size(), V, 100.0 * coverage, (long long)response_tokens,
        (long long)records, (long long)distinct_kept, (long long)distinct);
  }
  return 0;
}

}  // namespace

int cmd_drafter(int argc, char** argv) {
  static const Subcommand kWhat[] = {
      {"reduce-vocab", "a copy of a drafter with a reduced draft vocabulary (d2t / t2d) from its training data",
       reduce_vocab_cmd},
  };
  return run_subcommand("dspark drafter", kWhat, argc, argv);
}

}  // namespace dspark
