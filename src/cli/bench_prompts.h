// Prompts from JSONL, shared by `dspark bench spec`, `dspark bench serve` and `dspark calibrate`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dspark {

struct BenchPrompt {
  std::string category;
  std::string text;
  nlohmann::json question_id;  // MT-Bench / Spec-Bench "question_id" as given; null when absent
};

// Reads MT-Bench / Spec-Bench JSONL ({"question_id", "category", "turns": [...]}, first turn) or
// dspark corpus prompts ({"domain", "prompt"}); the first `limit` (0: all). A malformed line
// throws Error naming the file and line; a file without prompts too.
std::vector<BenchPrompt> read_prompts(const std::string& path, int limit);

// The first `per_category` prompts of every category, in file order (the prompts keep their
// order; a category with fewer keeps all of its). per_category <= 0 keeps every prompt.
std::vector<BenchPrompt> first_per_category(std::vector<BenchPrompt> prompts, int per_category);

// The held-out math prompts of the demo drafter, which `make demo`'s bench spec uses.
inline constexpr const char* kDemoMathPrompts = "models/demo-dspark/math_prompts.jsonl";

}  // namespace dspark
