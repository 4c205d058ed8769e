// Regeneration prompts for every kind of request a chat model gets, built from a corpus' train
// split (`dspark corpus build`): the drafter learns from the target's answers to these, so they
// must look like what users send, not like one template family.
//
// Kinds (the share of each is in prompt_mix_kinds()): the corpus' own instruction turns; GNU
// manual sections to summarize, explain, list or answer questions about (one or several passages,
// as retrieval-augmented prompts have them); KJV chapters to summarize or retell; GCIDE words to
// use, contrast or write with; FreeDict words and corpus sentences to translate both ways; Python
// standard-library functions to complete, explain, document or debug (a seeded one-token bug);
// math word problems in several phrasings and output formats; open writing, lists, step-by-step
// instructions and role play on topics from those sources; and two-turn chats whose second turn
// refers to the first.
//
// Nothing is read from evaluation sets: ngram_overlap.h checks the result against them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datagen/prompts.h"

namespace dspark::datagen {

struct MixedPrompt {
  std::string kind;
  RegenPrompt prompt;
};

struct PromptKind {
  std::string name;
  double weight;  // relative share of the mix
  std::string what;
};
const std::vector<PromptKind>& prompt_mix_kinds();

// `count` prompts from CORPUS/<domain>/train.jsonl and CORPUS/instructions/train.jsonl, each
// kind in its share (rounded; the remainder to the first kinds), shuffled with `seed` so that any
// prefix of the file is a mix too. Deterministic: the same corpus, count and seed give the same
// file. Errors name the file that is missing or holds nothing usable for a kind.
std::vector<MixedPrompt> build_prompt_mix(const std::string& corpus_dir, int64_t count,
                                          uint64_t seed);

// One JSONL line: {"kind", "prompt"} for one turn, {"kind", "turns"} for more (load_prompt_file
// reads both and ignores "kind").
std::string prompt_mix_line(const MixedPrompt& p);

}  // namespace dspark::datagen
