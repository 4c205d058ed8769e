// One pre-norm transformer decoder layer (Qwen3 / Llama) over a set of rows of many sequences,
// on the paged KV cache. Shared by the target forward and the drafters.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/buffer.h"
#include "kernels/attention.h"
#include "model/config.h"
#include "model/weights.h"

namespace dspark {

// The rows of one layer call: position, block table and visible prefix of each row, and
// RoPE tables (head_dim / 2 values per row).
struct LayerRows {
  int n = 0;
  const int32_t* positions = nullptr;
  const int32_t* const* tables = nullptr;
  const int32_t* visible = nullptr;
  const float* cos = nullptr;
  const float* sin = nullptr;
  const int32_t* start = nullptr;  // the first key each row sees (nullptr: 0)
};

// The rows of n consecutive positions p0.. of one sequence (drafters run their blocks and context
// this way): positions, block table, RoPE tables and what each row may see. Buffers grow to the
// largest n seen, then are reused.
struct SeqRows {
  enum class Visibility {
    None,        // no visibility rule (context K/V injection: no queries)
    Causal,      // row i sees keys < p0 + i + 1
    WholeBlock,  // every row sees the whole block and all context: keys < p0 + n
  };
  Buffer<int32_t> positions, visible, start;
  Buffer<const int32_t*> tables;
  Buffer<float> cos, sin;
  // The rows of several sequences' blocks one after another (drafters batching their rounds or
  // their context rows): block b is n positions p0.. of the sequence with `table`, each with
  // the visibility rule `v` within its own block. With a `window` > 0 a row sees only the last
  // `window` keys before its block (WholeBlock: a draft block's context) or up to itself
  // (Causal), as a drafter's sliding_window says.
  struct Block {
    const int32_t* table;
    int p0, n;
  };
  LayerRows make_blocks(const Rope& rope, std::span<const Block> blocks, Visibility v, int window = 0);
  // One block.
  LayerRows make(const Rope& rope, const int32_t* table, int p0, int n, Visibility v) {
    const Block b{table, p0, n};
    return make_blocks(rope, std::span<const Block>(&b, 1), v);
  }
};

// Scratch buffers of a layer call; grow to the largest n seen, then are reused.
struct LayerScratch {
  Buffer<float> xn, qkv, attn, gate_up, act;
  void ensure(const ModelConfig& c, int n, int64_t in);
};

// rope.scale * cos/sin of position * inv_freq, the angle in float64 (exact to f32 rounding at any
// position up to 2^31), half = inv_freq.size() values per row.
void rope_tables(const Rope& rope, const int32_t* positions, int n, float* cos, float* sin);

// h[n, H] += attention(input_layernorm(h)); h += mlp(post_attention_layernorm(h)).
// Writes the rows' K/V into `kv` at their positions before attending.
void decoder_layer(const ModelConfig& c, const LayerWeights& L, const PagedKvLayer& kv,
                   const LayerRows& rows, float* h, LayerScratch& s);

// The attention half of a layer on inputs that are already normed: xn[n, in] -> qkv ->
// q/k norm, RoPE, K/V write -> attention -> residual[n, H] += o_proj(attn).
void attention_block(const ModelConfig& c, const LayerWeights& L, const PagedKvLayer& kv,
                     const LayerRows& rows, const float* xn, int64_t in, float* residual,
                     LayerScratch& s);
// The MLP half: h[n, H] += down(silu(gate(post_norm(h))) * up(post_norm(h))).
void mlp_block(const ModelConfig& c, const LayerWeights& L, int n, float* h, LayerScratch& s);

// DFlash/DSpark context injection: K = k_norm(W_k x) with RoPE and V = W_v x for context rows
// x[n, H] (already fused and normed by the drafter), written into `kv`. No queries.
void inject_context_kv(const ModelConfig& c, const LayerWeights& L, const PagedKvLayer& kv,
                       const LayerRows& rows, const float* x, LayerScratch& s);

}  // namespace dspark
