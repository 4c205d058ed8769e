// SpecConfig: vLLM's --speculative-config JSON, validated; errors name the field.
#pragma once

#include <string>

namespace dspark {

enum class SpecMethod { DSpark, DFlash, Eagle3, Ngram };
enum class DraftSampleMethod { Greedy, Probabilistic };
enum class RejectionMethod { Standard, Block };

const char* spec_method_name(SpecMethod m);

struct SpecConfig {
  SpecMethod method = SpecMethod::DSpark;
  std::string model;              // drafter directory (not for ngram)
  int num_speculative_tokens = 0;  // 0: the drafter's default (its block)
  DraftSampleMethod draft_sample = DraftSampleMethod::Greedy;
  RejectionMethod rejection = RejectionMethod::Standard;
  int prompt_lookup_min = 0;       // ngram (0: default)
  int prompt_lookup_max = 0;
  float confidence_threshold = 0;  // dspark: verify only up to the first c_k below this (0: off)
  bool method_given = false;       // 'method' was in the JSON (else the drafter's config decides)

  // Parses the JSON text. `method` may be omitted when the drafter's config names it.
  static SpecConfig parse(const std::string& json_text);
};

}  // namespace dspark
