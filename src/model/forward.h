// Forward: one batched pass of the target over a flat list of tokens from many sequences.
#pragma once

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/kv_cache.h"
#include "model/layer.h"
#include "model/model.h"

namespace dspark {

// Tokens of one forward pass. Row i is token tokens[i] of KV sequence seq_ids[i] at position
// positions[i]. Rows of one sequence that see each other must be in position order.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_ids;
  // Optional: row i attends to positions [0, visible[i]) of its sequence. Empty means causal
  // (positions[i] + 1). A draft block sets every row to the block's end to see itself fully.
  std::vector<int32_t> visible;
  // Rows whose logits / hidden states are returned, in this order.
  std::vector<int32_t> output_rows;

  void clear();
  // Appends one token; `output` adds it to output_rows.
  void add(int32_t token, int32_t pos, int32_t seq, bool output);
  int size() const { return int(tokens.size()); }
};

struct ForwardRequest {
  // Layers whose outputs are tapped: 0-based decoder-layer outputs (the residual stream,
  // before the final norm); -1 is the embedding output.
  std::vector<int> tap_layers;
  bool logits = true;
  int logits_last = -1;       // logits only for the last this-many output rows (-1: all)
  bool final_hidden = false;  // the final-normed hidden state of each output row
};

// Views into the Forward's buffers; valid until its next run().
struct ForwardOutput {
  int n_out = 0;
  int vocab = 0;
  int hidden = 0;
  int n_taps = 0;
  // [n_out - logits_first, vocab]: the logits of output rows logits_first .. n_out - 1 (the rows
  // before get none when ForwardRequest::logits_last asks for fewer); read them with logits_row.
  const float* logits = nullptr;
  int logits_first = 0;
  const float* taps = nullptr;          // [n_out, n_taps, hidden]
  const float* final_hidden = nullptr;  // [n_out, hidden]

  const float* logits_row(int i) const { return logits + int64_t(i - logits_first) * vocab; }
  const float* tap(int i, int t) const { return taps + (int64_t(i) * n_taps + t) * hidden; }
  const float* final_row(int i) const { return final_hidden + int64_t(i) * hidden; }
};

class Forward {
 public:
  Forward(const Model& model, KvCache& kv);

  // Runs the batch: writes K/V of every row into the cache (reserving blocks as needed) and
  // returns the requested outputs. Buffers grow to the largest batch seen, then are reused.
  const ForwardOutput& run(const Batch& batch, const ForwardRequest& req);

  const Model& model() const { return model_; }
  KvCache& kv() { return kv_; }
  const KvCache& kv() const { return kv_; }

 private:
  void ensure_capacity(int n, int n_out, int n_taps, int n_logits);

  const Model& model_;
  KvCache& kv_;
  ForwardOutput out_;
  int cap_rows_ = 0, cap_out_ = 0, cap_taps_ = 0, cap_logits_ = 0;
  Buffer<float> h_, cos_, sin_;
  LayerScratch scratch_;
  Buffer<float> gathered_, logits_, taps_, final_;
  Buffer<int32_t> visible_;
  Buffer<const int32_t*> tables_;
};

}  // namespace dspark
