#include "model/layer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"

namespace dspark {

namespace {

// DSPARK_PROFILE=1 prints, at exit, where layer time went (by operation).
struct OpProfile {
  bool on = std::getenv("DSPARK_PROFILE") != nullptr;
  double seconds[8] = {};
  const char* names[8] = {"norms",  "qkv gemm",     "rope+kv write", "attention",
                          "o gemm", "gate_up gemm", "silu",          "down gemm"};
  ~OpProfile() {
    if (!on) return;
    double total = 0;
    for (double t : seconds) total += t;
    std::fprintf(stderr, "decoder layer profile (%.3f s):\n", total);
    for (int i = 0; i < 8; ++i)
      std::fprintf(stderr, "  %-14s %8.3f s %5.1f%%\n", names[i], seconds[i],
                   100 * seconds[i] / total);
  }
};
OpProfile g_profile;

struct Marker {
  double t = g_profile.on ? now_seconds() : 0;
  void operator()(int op) {
    if (!g_profile.on) return;
    const double now = now_seconds();
    g_profile.seconds[op] += now - t;
    t = now;
  }
};

// q/k/v biases (Qwen2), q/k norm (Qwen3), RoPE, and the K/V write, per row. Without `has_q`
// the rows hold only K and V (at k_offset 0).
void qk_rope_write(const ModelConfig& c, const LayerWeights& L, const PagedKvLayer& kv,
                   const LayerRows& rows, float* qkv, int64_t ld, int64_t k_offset, bool has_q) {
  const int64_t hd = c.head_dim, half = hd / 2;
  const int chunk = 16;
  parallel_for((rows.n + chunk - 1) / chunk, [&](int task) {
    for (int i = task * chunk; i < std::min(rows.n, (task + 1) * chunk); ++i) {
      float* row = qkv + int64_t(i) * ld;
      float* kr = row + k_offset;
      float* vr = kr + c.kv_dim();
      if (L.qkv_bias) {
        if (has_q) add_bias(row, L.qkv_bias, c.q_dim());
        add_bias(kr, L.qkv_bias + c.q_dim(), 2 * c.kv_dim());
      }
      if (c.qk_norm) {
        if (has_q) rmsnorm(row, hd, L.q_norm, row, hd, c.num_heads, int(hd), c.rms_norm_eps);
        rmsnorm(kr, hd, L.k_norm, kr, hd, c.num_kv_heads, int(hd), c.rms_norm_eps);
      }
      if (has_q) rope(row, 0, 1, c.num_heads, int(hd), rows.cos + i * half, rows.sin + i * half);
      rope(kr, 0, 1, c.num_kv_heads, int(hd), rows.cos + i * half, rows.sin + i * half);
      kv_write(kv, rows.tables[i], rows.positions[i], kr, vr);
    }
  });
}

}  // namespace

void LayerScratch::ensure(const ModelConfig& c, int n, int64_t in) {
  const size_t rows = size_t(std::max(n, 1));
  xn.resize(rows * size_t(std::max<int64_t>(in, c.hidden_size)));
  qkv.resize(rows * size_t(c.q_dim() + 2 * c.kv_dim()));
  attn.resize(rows * size_t(c.q_dim()));
  gate_up.resize(rows * size_t(2 * c.intermediate_size));
  act.resize(rows * size_t(c.intermediate_size));
}

void rope_tables(const Rope& rope, const int32_t* positions, int n, float* cos, float* sin) {
  const size_t half = rope.inv_freq.size();
  for (int i = 0; i < n; ++i) {
    const double pos = positions[i];
    for (size_t j = 0; j < half; ++j) {
      const double a = pos * rope.inv_freq[j];
      cos[size_t(i) * half + j] = float(rope.scale * std::cos(a));
      sin[size_t(i) * half + j] = float(rope.scale * std::sin(a));
    }
  }
}

LayerRows SeqRows::make_blocks(const Rope& rope, std::span<const Block> blocks,
                               Visibility v, int window) {
  int n = 0;
  for (const Block& b : blocks) n += b.n;
  positions.resize(size_t(n));
  visible.resize(size_t(n));
  start.resize(size_t(n));
  tables.resize(size_t(n));
  const size_t half = rope.inv_freq.size();
  cos.resize(size_t(n) * half);
  sin.resize(size_t(n) * half);
  int row = 0;
  for (const Block& b : blocks)
    for (int i = 0; i < b.n; ++i, ++row) {
      positions[size_t(row)] = b.p0 + i;
      visible[size_t(row)] = v == Visibility::Causal ? b.p0 + i + 1 : b.p0 + b.n;
      start[size_t(row)] = window <= 0 ? 0 : std::max(0, (v == Visibility::Causal ? b.p0 + i + 1 : b.p0) - window);
      tables[size_t(row)] = b.table;
    }
  rope_tables(rope, positions.data(), n, cos.data(), sin.data());
  return {n,
          positions.data(),
          tables.data(),
          v == Visibility::None ? nullptr : visible.data(),
          cos.data(),
          sin.data(),
          window > 0 ? start.data() : nullptr};
}

void attention_block(const ModelConfig& c, const LayerWeights& L, const PagedKvLayer& kv,
                     const LayerRows& rows, const float* xn, int64_t in, float* residual,
                     LayerScratch& s) {
  const int n = rows.n;
  const int64_t H = c.hidden_size, qkv_ld = c.q_dim() + 2 * c.kv_dim();
  s.ensure(c, n, in);
  Marker mark;
  gemm(xn, n, in, L.qkv, s.qkv.data(), qkv_ld);
  mark(1);
  qk_rope_write(c, L, kv, rows, s.qkv.data(), qkv_ld, c.q_dim(), /*has_q=*/true);
  mark(2);
  attention(kv, AttentionRows{n, rows.tables, rows.visible, rows.start}, s.qkv.data(), qkv_ld, c.num_heads,
            1.f / std::sqrt(float(c.head_dim)), s.attn.data(), c.q_dim());
  mark(3);
  gemm(s.attn.data(), n, c.q_dim(), L.o, residual, H, /*accumulate=*/true);
  mark(4);
}

void mlp_block(const ModelConfig& c, const LayerWeights& L, int n, float* h, LayerScratch& s) {
  const int64_t H = c.hidden_size;
  s.ensure(c, n, H);
  Marker mark;
  rmsnorm(h, H, L.mlp_norm, s.xn.data(), H, n, int(H), c.rms_norm_eps);
  mark(0);
  gemm(s.xn.data(), n, H, L.gate_up, s.gate_up.data(), 2 * c.intermediate_size);
  mark(5);
  silu_mul(s.gate_up.data(), 2 * c.intermediate_size, s.act.data(), c.intermediate_size, n,
           c.intermediate_size);
  mark(6);
  gemm(s.act.data(), n, c.intermediate_size, L.down, h, H, /*accumulate=*/true);
  mark(7);
}

void decoder_layer(const ModelConfig& c, const LayerWeights& L, const PagedKvLayer& kv,
                   const LayerRows& rows, float* h, LayerScratch& s) {
  const int64_t H = c.hidden_size;
  s.ensure(c, rows.n, H);
  Marker mark;
  rmsnorm(h, H, L.attn_norm, s.xn.data(), H, rows.n, int(H), c.rms_norm_eps);
  mark(0);
  attention_block(c, L, kv, rows, s.xn.data(), H, h, s);
  mlp_block(c, L, rows.n, h, s);
}

void inject_context_kv(const ModelConfig& c, const LayerWeights& L, const PagedKvLayer& kv,
                       const LayerRows& rows, const float* x, LayerScratch& s) {
  if (rows.n == 0) return;
  const int64_t H = c.hidden_size, kv2 = 2 * c.kv_dim();
  s.ensure(c, rows.n, H);
  // The K and V rows of the fused qkv matrix.
  gemm(x, rows.n, H, L.qkv.rows(c.q_dim(), int(kv2)), s.qkv.data(), kv2);
  qk_rope_write(c, L, kv, rows, s.qkv.data(), kv2, 0, /*has_q=*/false);
}

}  // namespace dspark
