// dspark: lossless speculative decoding on CPU. One binary, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int, char**);
};

const Command kCommands[] = {
    {"generate", "generate text from a prompt with a local HF checkpoint", dspark::cmd_generate},
    {"serve", "serve a model over an OpenAI-compatible HTTP API (continuous batching, speculative decoding)", dspark::cmd_serve},
    {"tokenize", "print the token ids of text read from stdin", dspark::cmd_tokenize},
    {"bench", "benchmarks: target step latency (SPS curve), memory bandwidth, speculative speedup", dspark::cmd_bench},
    {"model", "create (random, for tests) or inspect model directories", dspark::cmd_model},
    {"corpus", "build the training corpus from Debian-shipped text; tokenize it into shards", dspark::cmd_corpus},
    {"tokenizer", "train a byte-level BPE tokenizer.json", dspark::cmd_tokenizer},
    {"train", "train target models and drafters (runs the dspark-train binary)", dspark::cmd_train},
    {"datagen", "drafter training data: regenerate responses with the target, store its hidden states", dspark::cmd_datagen},
    {"calibrate", "fit a DSpark drafter's confidence temperatures (STS) on held-out prompts", dspark::cmd_calibrate},
    {"drafter", "operations on trained drafters: a reduced draft vocabulary from the training data", dspark::cmd_drafter},
};

void print_usage(FILE* out) {
  std::fprintf(out, "usage: dspark <command> [flags]   (dspark <command> --help for its flags)\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(argc - 2, argv + 2);
    } catch (const dspark::Error& e) {
      std::fprintf(stderr, "dspark %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dspark %s: internal error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "dspark: unknown command '%s'\n\n", argv[1]);
  print_usage(stderr);
  return 2;
}
