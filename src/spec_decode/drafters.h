// Constructors of the drafting methods (see drafter.h for the interface).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "model/model.h"
#include "spec_decode/drafter.h"
#include "spec_decode/drafter_config.h"

namespace dspark {

// `to_target[i]` is the target id of draft id i under a reduced draft vocabulary
// (cfg.draft_vocab_size entries); empty: the target's vocabulary. See draft_vocab_map.
std::unique_ptr<Drafter> make_dspark_drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                                             DType dtype, std::vector<int32_t> to_target = {});
std::unique_ptr<Drafter> make_dflash_drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                                             DType dtype, std::vector<int32_t> to_target = {});
std::unique_ptr<Drafter> make_eagle3_drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                                             DType dtype, std::vector<int32_t> to_target = {});

// The reduced draft vocabulary of a checkpoint (Speculators' convention): tensor d2t [n] (I64)
// maps draft id i to target id i + d2t[i], optional t2d [vocab] (BOOL) marks the kept target ids.
// Validates both (range, duplicates, agreement, draft_vocab_size) and returns draft id ->
// target id, or an empty vector when the checkpoint has none; sets dc.draft_vocab_size to n (0)
// and dc.keeps_full_head.
std::vector<int32_t> draft_vocab_map(DrafterConfig& dc, const TensorStore& store, int vocab);
std::unique_ptr<Drafter> make_ngram_drafter(int min_n, int max_n, int max_tokens);

// Tensor names each method's checkpoint may hold (beyond these, a tensor is an error).
std::vector<std::string> dspark_head_names(const DrafterConfig& cfg);
std::vector<std::string> eagle3_names(const DrafterConfig& cfg);

}  // namespace dspark
