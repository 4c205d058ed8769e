// Step profiling: target forward latency against batch shape (the SPS(B) curve), prefill
// speed, and the machine's memory read bandwidth for roofline comparisons.
#pragma once

#include <vector>

#include "model/model.h"

namespace dspark {

struct StepPoint {
  int context = 0;         // positions already in each sequence's cache
  int batch = 0;           // sequences in the step
  int tokens_per_seq = 0;  // tokens each sequence verifies (1 = plain decode)
  double seconds = 0;      // median latency of one forward
  std::vector<double> samples;  // every timed repetition, in the order run
};

struct StepProfileOptions {
  std::vector<int> contexts{512, 4096};
  std::vector<int> batches{1, 4, 16};
  std::vector<int> tokens{1, 2, 4, 8, 16};
  int reps = 5;
  DType kv_dtype = DType::BF16;
  // false: each point's repetitions back to back. true: every point once per pass, `reps`
  // passes (after one untimed pass), so a burst of load from other processes slows one sample of
  // every point rather than every sample of one point (the points of a context share a pass).
  bool interleave = false;
};

// Memory that profile_steps (and profile_prefill of `prefill_tokens`, 0: none) will need: KV cache
// and activations, in bytes.
int64_t step_profile_bytes(const ModelConfig& c, const StepProfileOptions& opt, int prefill_tokens);
// Refuses, before any allocation, options that profile_steps cannot run: empty lists, values
// below 1, or more memory than this machine has (the message gives the size).
void check_step_profile(const ModelConfig& c, const StepProfileOptions& opt, int prefill_tokens);

// Times one forward per (context, batch, tokens) point; every row gets logits, as in
// verification. Cache contents are filled with random values so reads hit real memory.
std::vector<StepPoint> profile_steps(const Model& model, const StepProfileOptions& opt);

// Tokens per second of a from-scratch prefill of `tokens` tokens in chunks of `chunk`.
double profile_prefill(const Model& model, int tokens, int chunk, DType kv_dtype);

// Bytes one decode step must read from memory: every layer matrix and the lm_head.
size_t streamed_weight_bytes(const Model& model);

// Read bandwidth from DRAM in bytes/s, measured on the compute threads over a buffer far
// larger than the caches.
double measure_read_bandwidth(size_t bytes = size_t(1) << 30);

}  // namespace dspark
