// SpecConfig: vLLM's --speculative-config JSON, validated; errors name the field.
#pragma once

#include <string>
#include <vector>

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
  // dspark: the hardware-aware prefix length policy (DSpark Algorithm 1) chooses how many drafts
  // to verify from the confidences and the cost of a round (vLLM's enable_adaptive_verification).
  bool adaptive_verification = false;
  // Its cost curve: rounds per second when a round verifies B = 1, 2, ... tokens (index B - 1).
  // Empty ("auto"): the target's step time is profiled at load and the drafting time is
  // learned from the rounds already run.
  std::vector<double> sps_curve;
  // When the curve came from a file `dspark bench step --sps-out` wrote: its path and the machine
  // it describes (fields absent from the file stay empty / 0 and are not checked).
  struct SpsCurveOrigin {
    std::string file, cpu, gemm, dtype;
    int threads = 0;
  } sps_curve_origin;
  // vLLM's "quantization" of the draft model: "int8" quantizes the drafter's bf16 matrices to
  // weight-only int8 (one scale per row) when it loads, halving the bytes a drafting round reads;
  // "q8_0", "q4_0", "q5_0" or "q4_k" quantizes them to that block format as --quantization does
  // for a target (its decoder layers then run on the quantized kernels). Empty: the drafter runs
  // in the engine's dtype.
  std::string quantization;
  // vLLM's "extract_hidden_states": no drafter; the target's hidden states at aux_layer_ids
  // (draft_model_config.hf_config.eagle_aux_hidden_state_layer_ids, vLLM's ids: the residual
  // stream entering layer i, num_hidden_layers the last layer's output before the final norm)
  // are exported through the --kv-transfer-config connector. Decoding is plain.
  bool extract_hidden_states = false;
  std::vector<int> aux_layer_ids;
  bool method_given = false;       // 'method' was in the JSON (else the drafter's config decides)

  // Parses the JSON text. `method` may be omitted when the drafter's config names it.
  static SpecConfig parse(const std::string& json_text);
};

}  // namespace dspark
