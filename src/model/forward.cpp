#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace dspark {

void Batch::clear() {
  tokens.clear();
  positions.clear();
  seq_ids.clear();
  visible.clear();
  output_rows.clear();
}

void Batch::add(int32_t token, int32_t pos, int32_t seq, bool output) {
  if (output) output_rows.push_back(int32_t(tokens.size()));
  tokens.push_back(token);
  positions.push_back(pos);
  seq_ids.push_back(seq);
}

Forward::Forward(const Model& model, KvCache& kv) : model_(model), kv_(kv) {
  const ModelConfig& c = model.config();
  if (kv.n_layers() != c.num_layers) fail("KV cache has ", kv.n_layers(), " layers, the model ", c.num_layers);
}

namespace {

// Scratch grows to powers of two (16 rows at least): a server's step sizes vary from step to
// step, and growing to each new largest size exactly would free and reallocate every buffer at
// each one, leaving holes in the heap; this way a buffer is reallocated at most log2(max / 16)
// times and is never more than twice the rows it must hold.
int grown(int n) {
  int c = 16;
  while (c < n) c *= 2;
  return c;
}

}  // namespace

void Forward::ensure_capacity(int n, int n_out, int n_taps, int n_logits) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.hidden_size;
  if (n > cap_rows_) {
    cap_rows_ = grown(n);
    const size_t rows = size_t(cap_rows_);
    h_.resize(rows * size_t(H));
    scratch_.ensure(c, cap_rows_, H);
    cos_.resize(rows * size_t(c.head_dim / 2));
    sin_.resize(rows * size_t(c.head_dim / 2));
    visible_.resize(rows);
    tables_.resize(rows);
  }
  if (n_out > cap_out_ || n_taps > cap_taps_) {
    cap_out_ = std::max(grown(n_out), cap_out_);
    cap_taps_ = std::max(n_taps, cap_taps_);
    gathered_.resize(size_t(cap_out_) * size_t(H));
    final_.resize(size_t(cap_out_) * size_t(H));
    taps_.resize(size_t(cap_out_) * size_t(std::max(cap_taps_, 1)) * size_t(H));
  }
  // Logits only for the rows that get them (a step's prompt rows kept for their taps get none),
  // written from the buffer's start: a vocab-wide row per output row would size it by every
  // prompt row of the largest step, and writing each step's rows at their output-row offsets
  // touched more and more of its pages (serve's RSS crept by ~9 MB of it under load).
  if (n_logits > cap_logits_) {
    cap_logits_ = grown(n_logits);
    logits_.resize(size_t(cap_logits_) * size_t(c.vocab_size));
  }
}

const ForwardOutput& Forward::run(const Batch& b, const ForwardRequest& req) {
  const ModelConfig& c = model_.config();
  const int n = b.size();
  const int n_out = int(b.output_rows.size());
  const int n_taps = int(req.tap_layers.size());
  if (int(b.positions.size()) != n || int(b.seq_ids.size()) != n)
    fail("batch: tokens, positions and seq_ids must have the same length");
  if (!b.visible.empty() && int(b.visible.size()) != n) fail("batch: visible must be empty or one per token");
  for (int t : req.tap_layers)
    if (t < -1 || t >= c.num_layers) fail("hidden-state tap layer ", t, " is outside [-1, ", c.num_layers - 1, "]");
  for (int r : b.output_rows)
    if (r < 0 || r >= n) fail("batch: output row ", r, " is outside the batch of ", n);
  out_ = ForwardOutput{};
  out_.n_out = n_out;
  out_.vocab = c.vocab_size;
  out_.hidden = c.hidden_size;
  out_.n_taps = n_taps;
  if (n == 0) return out_;
  // Rows before the last `logits_last` get no logits (prefill with taps needs only one).
  const int logits_skip =
      req.logits_last >= 0 ? std::max(0, n_out - req.logits_last) : 0;
  ensure_capacity(n, n_out, n_taps, req.logits ? n_out - logits_skip : 0);

  const int64_t H = c.hidden_size;
  for (int i = 0; i < n; ++i) {
    if (b.tokens[size_t(i)] < 0 || b.tokens[size_t(i)] >= c.vocab_size)
      fail("batch: token id ", b.tokens[size_t(i)], " is outside the vocabulary (", c.vocab_size, ")");
    if (b.positions[size_t(i)] < 0) fail("batch: negative position");
  }
  // Reserve cache blocks for every sequence first: block tables may move while they grow.
  for (int i = 0; i < n; ++i) {
    const int seq = b.seq_ids[size_t(i)];
    const int need = b.positions[size_t(i)] + 1;
    if (kv_.length(seq) < need) {
      kv_.reserve(seq, need);
      kv_.set_length(seq, need);
    }
  }
  for (int i = 0; i < n; ++i) {
    tables_[size_t(i)] = kv_.block_table(b.seq_ids[size_t(i)]);
    visible_[size_t(i)] = b.visible.empty() ? b.positions[size_t(i)] + 1 : b.visible[size_t(i)];
    if (visible_[size_t(i)] > kv_.length(b.seq_ids[size_t(i)]))
      fail("batch: row ", i, " sees ", visible_[size_t(i)], " positions but its sequence holds ",
           kv_.length(b.seq_ids[size_t(i)]));
  }

  rope_tables(model_.rope(), b.positions.data(), n, cos_.data(), sin_.data());

  float* h = h_.data();
  embed_rows(model_.embed().data, model_.dtype(), int(H), b.tokens.data(), n, h, H);

  auto tap = [&](int layer_id) {
    for (int t = 0; t < n_taps; ++t) {
      if (req.tap_layers[size_t(t)] != layer_id) continue;
      for (int o = 0; o < n_out; ++o)
        std::memcpy(taps_.data() + (int64_t(o) * n_taps + t) * H, h + int64_t(b.output_rows[size_t(o)]) * H,
                    size_t(H) * 4);
    }
  };
  tap(-1);
  const LayerRows rows{n, b.positions.data(), tables_.data(), visible_.data(), cos_.data(), sin_.data()};
  for (int l = 0; l < c.num_layers; ++l) {
    decoder_layer(c, model_.layer(l), kv_.layer(l), rows, h, scratch_);
    tap(l);
  }

  if (n_out > 0 && (req.logits || req.final_hidden)) {
    for (int o = 0; o < n_out; ++o)
      std::memcpy(gathered_.data() + int64_t(o) * H, h + int64_t(b.output_rows[size_t(o)]) * H, size_t(H) * 4);
    rmsnorm(gathered_.data(), H, model_.final_norm(), final_.data(), H, n_out, int(H), c.rms_norm_eps);
    if (req.logits) {
      gemm(final_.data() + int64_t(logits_skip) * H, n_out - logits_skip, H, model_.lm_head(),
           logits_.data(), c.vocab_size);
      out_.logits = logits_.data();
      out_.logits_first = logits_skip;
    }
    if (req.final_hidden) out_.final_hidden = final_.data();
  }
  if (n_taps > 0) out_.taps = taps_.data();
  return out_;
}

}  // namespace dspark
