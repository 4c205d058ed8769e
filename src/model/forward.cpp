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

namespace {

// DSPARK_PROFILE=1 prints, at exit, where forward time went (by operation).
struct OpProfile {
  bool on = std::getenv("DSPARK_PROFILE") != nullptr;
  double seconds[8] = {};
  const char* names[8] = {"norms", "qkv gemm", "rope+kv write", "attention", "o gemm", "gate_up gemm", "silu", "down gemm"};
  double lm_head = 0;
  ~OpProfile() {
    if (!on) return;
    double total = lm_head;
    for (double t : seconds) total += t;
    std::fprintf(stderr, "forward profile (%.3f s):\n", total);
    for (int i = 0; i < 8; ++i) std::fprintf(stderr, "  %-14s %8.3f s %5.1f%%\n", names[i], seconds[i], 100 * seconds[i] / total);
    std::fprintf(stderr, "  %-14s %8.3f s %5.1f%%\n", "lm_head", lm_head, 100 * lm_head / total);
  }
};
OpProfile g_profile;

}  // namespace

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

void Forward::ensure_capacity(int n, int n_out, int n_taps) {
  const ModelConfig& c = model_.config();
  const int64_t H = c.hidden_size;
  if (n > cap_rows_) {
    cap_rows_ = std::max(n, 16);
    const size_t rows = size_t(cap_rows_);
    h_.resize(rows * size_t(H));
    xn_.resize(rows * size_t(H));
    qkv_.resize(rows * size_t(c.q_dim() + 2 * c.kv_dim()));
    attn_.resize(rows * size_t(c.q_dim()));
    gate_up_.resize(rows * size_t(2 * c.intermediate_size));
    act_.resize(rows * size_t(c.intermediate_size));
    cos_.resize(rows * size_t(c.head_dim / 2));
    sin_.resize(rows * size_t(c.head_dim / 2));
    visible_.resize(rows);
    tables_.resize(rows);
  }
  if (n_out > cap_out_ || n_taps > cap_taps_) {
    cap_out_ = std::max(n_out, cap_out_);
    cap_taps_ = std::max(n_taps, cap_taps_);
    gathered_.resize(size_t(cap_out_) * size_t(H));
    logits_.resize(size_t(cap_out_) * size_t(c.vocab_size));
    final_.resize(size_t(cap_out_) * size_t(H));
    taps_.resize(size_t(cap_out_) * size_t(std::max(cap_taps_, 1)) * size_t(H));
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
  ensure_capacity(n, n_out, n_taps);

  const int64_t H = c.hidden_size, hd = c.head_dim, half = hd / 2;
  const int64_t qkv_ld = c.q_dim() + 2 * c.kv_dim();
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

  // RoPE angles per row: position * inv_freq in f32, as the HF reference computes them.
  const std::vector<float>& inv = model_.rope_inv_freq();
  for (int i = 0; i < n; ++i) {
    const float pos = float(b.positions[size_t(i)]);
    for (int64_t j = 0; j < half; ++j) {
      const float a = pos * inv[size_t(j)];
      cos_[size_t(i * half + j)] = std::cos(a);
      sin_[size_t(i * half + j)] = std::sin(a);
    }
  }

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

  AttentionRows rows{n, tables_.data(), visible_.data()};
  const float scale = 1.f / std::sqrt(float(hd));
  const int row_chunk = 16;
  const int row_tasks = (n + row_chunk - 1) / row_chunk;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = model_.layer(l);
    const PagedKvLayer kvl = kv_.layer(l);
    const bool prof = g_profile.on;
    double t = prof ? now_seconds() : 0;
    auto mark = [&](int op) {
      if (!prof) return;
      const double now = now_seconds();
      g_profile.seconds[op] += now - t;
      t = now;
    };
    rmsnorm(h, H, L.attn_norm, xn_.data(), H, n, int(H), c.rms_norm_eps);
    mark(0);
    gemm(xn_.data(), n, H, L.qkv, qkv_.data(), qkv_ld);
    mark(1);
    // Per-row: q/k norm (Qwen3), RoPE, and the K/V write into the paged cache.
    parallel_for(row_tasks, [&](int task) {
      for (int i = task * row_chunk; i < std::min(n, (task + 1) * row_chunk); ++i) {
        float* qr = qkv_.data() + int64_t(i) * qkv_ld;
        float* kr = qr + c.q_dim();
        float* vr = kr + c.kv_dim();
        if (c.qk_norm) {
          rmsnorm(qr, hd, L.q_norm, qr, hd, c.num_heads, int(hd), c.rms_norm_eps);
          rmsnorm(kr, hd, L.k_norm, kr, hd, c.num_kv_heads, int(hd), c.rms_norm_eps);
        }
        rope(qr, 0, 1, c.num_heads, int(hd), cos_.data() + i * half, sin_.data() + i * half);
        rope(kr, 0, 1, c.num_kv_heads, int(hd), cos_.data() + i * half, sin_.data() + i * half);
        kv_write(kvl, tables_[size_t(i)], b.positions[size_t(i)], kr, vr);
      }
    });
    mark(2);
    attention(kvl, rows, qkv_.data(), qkv_ld, c.num_heads, scale, attn_.data(), c.q_dim());
    mark(3);
    gemm(attn_.data(), n, c.q_dim(), L.o, h, H, /*accumulate=*/true);
    mark(4);
    rmsnorm(h, H, L.mlp_norm, xn_.data(), H, n, int(H), c.rms_norm_eps);
    mark(0);
    gemm(xn_.data(), n, H, L.gate_up, gate_up_.data(), 2 * c.intermediate_size);
    mark(5);
    silu_mul(gate_up_.data(), 2 * c.intermediate_size, act_.data(), c.intermediate_size, n, c.intermediate_size);
    mark(6);
    gemm(act_.data(), n, c.intermediate_size, L.down, h, H, /*accumulate=*/true);
    mark(7);
    tap(l);
  }

  if (n_out > 0 && (req.logits || req.final_hidden)) {
    for (int o = 0; o < n_out; ++o)
      std::memcpy(gathered_.data() + int64_t(o) * H, h + int64_t(b.output_rows[size_t(o)]) * H, size_t(H) * 4);
    rmsnorm(gathered_.data(), H, model_.final_norm(), final_.data(), H, n_out, int(H), c.rms_norm_eps);
    if (req.logits) {
      const double t0 = g_profile.on ? now_seconds() : 0;
      gemm(final_.data(), n_out, H, model_.lm_head(), logits_.data(), c.vocab_size);
      if (g_profile.on) g_profile.lm_head += now_seconds() - t0;
      out_.logits = logits_.data();
    }
    if (req.final_hidden) out_.final_hidden = final_.data();
  }
  if (n_taps > 0) out_.taps = taps_.data();
  return out_;
}

}  // namespace dspark
