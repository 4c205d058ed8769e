// Reduced draft vocabularies (EAGLE-3's d2t / t2d, as Speculators writes them) for any drafter:
// the drafter's head scores only the target ids its own training answers use, so the logits, the
// Markov bias and the choice of every drafted token touch a fraction of the vocabulary.
// Verification still sees a q over the whole target vocabulary (zero outside), so it stays exact.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace dspark {

// The `size` target ids to keep: every id in `always` first (stop tokens, so that a draft can
// end), then by count in `primary` (the response tokens of the drafter's training data), then
// by count in `secondary` (its prompt tokens), then by lower id. Ids whose `allowed` entry is 0
// are never chosen (empty: all allowed). Returns the chosen ids in ascending order.
std::vector<int32_t> choose_draft_vocab(std::span<const int64_t> primary,
                                        std::span<const int64_t> secondary,
                                        std::span<const uint8_t> allowed,
                                        std::span<const int32_t> always, int size);

// Target ids the drafter at `dir` can propose now: its own draft vocabulary, or all of them.
std::vector<uint8_t> drafter_vocab_mask(const std::string& dir, int target_vocab);
// Target ids its head scores (all of them when it keeps the full head): what a reduction may keep.
std::vector<uint8_t> drafter_head_mask(const std::string& dir, int target_vocab);

// Writes to `out_dir` (not `dir`) the drafter at `dir` with the draft vocabulary `keep` (target
// ids, ascending, each scored by its head): d2t / t2d and config.json's draft_vocab_size describe
// it; the other tensors, the rest of config.json and the directory's other files are copied.
// A DSpark / DFlash drafter keeps its full head, from which the engine copies the kept rows at
// load: every round, greedy or sampled, drafts over the draft vocabulary. With
// `reduced_head`, and always for EAGLE-3 or a head that holds only a draft vocabulary already,
// lm_head.weight (the drafter's own rows, or the target's head when it has none) and DSpark's
// markov_head.markov_w2.weight keep only the kept rows, and every round drafts over them.
void write_reduced_drafter(const std::string& dir, const Model& target,
                           std::span<const int32_t> keep, const std::string& out_dir,
                           bool reduced_head = false);

}  // namespace dspark
