// Constructors of the drafting methods (see drafter.h for the interface).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "spec/drafter.h"
#include "spec/drafter_config.h"

namespace dspark {

std::unique_ptr<Drafter> make_dspark_drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                                             DType dtype);
std::unique_ptr<Drafter> make_dflash_drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                                             DType dtype);
// d2t[i]: offset from draft id i to its target id (empty: the same vocabulary).
std::unique_ptr<Drafter> make_eagle3_drafter(const DrafterConfig& cfg, const Model& target, const WeightSource& src,
                                             DType dtype, std::vector<int64_t> d2t);
std::unique_ptr<Drafter> make_ngram_drafter(int min_n, int max_n, int max_tokens);

// Tensor names each method's checkpoint may hold (beyond these, a tensor is an error).
std::vector<std::string> dspark_head_names(const DrafterConfig& cfg);
std::vector<std::string> eagle3_names(const DrafterConfig& cfg);

}  // namespace dspark
