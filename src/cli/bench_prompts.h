// Prompts from JSONL, shared by `dspark bench spec`, `dspark bench serve` and `dspark calibrate`.
#pragma once

#include <string>
#include <vector>

namespace dspark {

struct BenchPrompt {
  std::string category;
  std::string text;
};

// Reads MT-Bench / Spec-Bench JSONL ({"category", "turns": [...]}, first turn) or dspark
// corpus prompts ({"domain", "prompt"}); the first `limit` (0: all). A malformed line throws
// Error naming the file and line; a file without prompts too.
std::vector<BenchPrompt> read_prompts(const std::string& path, int limit);

// The held-out math prompts of the demo drafter, which `make demo`'s bench spec uses.
inline constexpr const char* kDemoMathPrompts = "models/demo-dspark/math_prompts.jsonl";

}  // namespace dspark
