// dspark: lossless speculative decoding on CPU. One binary, one subcommand per job.
#include "core/flags.h"
#include "cli/commands.h"

namespace {

const dspark::Subcommand kCommands[] = {
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

}  // namespace

int main(int argc, char** argv) { return dspark::run_program("dspark", kCommands, argc, argv); }
