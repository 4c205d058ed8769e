// WeightArena: owns a model's (or drafter's) weights in one huge-page allocation, and reads
// HF-named tensors into the kernels' layouts.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "kernels/gemm.h"
#include "model/config.h"
#include "model/weight_source.h"

namespace dspark {

struct LayerWeights {
  WeightMatrix qkv;      // [q_dim + 2 kv_dim, in]: q_proj, k_proj, v_proj stacked
  WeightMatrix o;        // [H, q_dim]
  WeightMatrix gate_up;  // [2 I, H]: gate_proj, up_proj stacked
  WeightMatrix down;     // [H, I]
  const float* attn_norm = nullptr;  // [H]
  const float* mlp_norm = nullptr;   // [H]
  const float* q_norm = nullptr;     // [head_dim] (Qwen3)
  const float* k_norm = nullptr;     // [head_dim] (Qwen3)
  const float* qkv_bias = nullptr;   // [q_dim + 2 kv_dim]: q_proj, k_proj, v_proj biases (Qwen2)
};

class WeightArena {
 public:
  // `matrix_bytes` is the capacity for matrices (see matrix_bytes()).
  WeightArena(DType dtype, size_t matrix_bytes);
  // One matrix, aligned, with room for its panel layout (rows padded to 16) when bf16.
  static size_t matrix_bytes(DType dtype, int64_t rows, int64_t cols);

  DType dtype() const { return dtype_; }
  // An uninitialised matrix [rows, cols] in the arena's dtype.
  WeightMatrix take(int64_t rows, int64_t cols);
  // Reads tensor `name` of shape [rows, cols] into rows [row0, row0+rows) of w.
  void fill(const WeightSource& src, const std::string& name, WeightMatrix& w, int64_t row0, int64_t rows);
  WeightMatrix matrix(const WeightSource& src, const std::string& name, int64_t rows, int64_t cols);
  // A matrix of `cols` columns stacked from tensors (name, rows), in order, ready for gemm(). In a
  // bf16 arena it is held in the source's quantized blocks (kernels/qgemm.h) when every part is
  // quantized in a type the kernels read (qgemm_supports), `cols` is whole superblocks and every
  // part starts at a multiple of 16 rows; otherwise in the arena's dtype, packed as pack() does
  // when `pack` is set.
  WeightMatrix stacked(const WeightSource& src, const std::vector<std::pair<std::string, int64_t>>& parts, int64_t cols,
                       bool pack = true);
  // Whether stacked() holds these parts quantized.
  bool holds_quantized(const WeightSource& src, const std::vector<std::pair<std::string, int64_t>>& parts,
                       int64_t cols) const;
  // Repacks a filled matrix of this arena in place into the panel layout the AVX2 kernels read
  // fastest, when it is bf16 and the current gemm backend wants panels (see gemm_wants_panels).
  // Not for matrices whose rows are read directly (embeddings).
  void pack(WeightMatrix& w);
  // A panel-packed copy of `w` in new arena space (a tied lm_head whose rows stay the embedding
  // table), or `w` itself when panels are not wanted.
  WeightMatrix packed_copy(const WeightMatrix& w);
  // A copy of rows `rows` of `w` (any layout or dtype) in this arena's dtype, packed as pack()
  // does.
  WeightMatrix row_copy(const WeightMatrix& w, std::span<const int32_t> rows);
  // A vector of f32 (norm weights, biases) read from `name` with `n` elements.
  const float* vector(const WeightSource& src, const std::string& name, int64_t n);
  // One f32 vector of vectors (name, n) read in order, e.g. stacked biases.
  const float* stacked_vector(const WeightSource& src, const std::vector<std::pair<std::string, int64_t>>& parts);
  // f32 storage of any shape (kept in f32 whatever the arena dtype), e.g. small heads.
  const float* f32(const WeightSource& src, const std::string& name, const std::vector<int64_t>& shape);
  size_t bytes_used() const { return used_; }

 private:
  DType dtype_;
  HugeBuffer matrices_;
  size_t used_ = 0;
  std::deque<std::vector<float>> vectors_;
};

// Weight-only int8 (quantize_int8, kernels/gemm.h) of a matrix held as bf16 pair panels, in place;
// any other layout (f32, rows, the AVX2 panels, k < 4) is left as it is. For a drafter's matrices
// only: its proposals may change, what is generated cannot (verification keeps the target's).
void quantize_int8_if_paired(WeightMatrix& w);
void quantize_int8_if_paired(LayerWeights& L);

// Whether quantized matrices are held for the quantized kernels (the default), or dequantized to
// bf16 (DSPARK_QUANTIZED_KERNELS=0: the same weights with bf16 activations, for comparisons).
bool quantized_kernels_enabled();

// Bytes of the matrices of one decoder layer whose attention input has `in` features.
size_t decoder_layer_bytes(const ModelConfig& c, DType dtype, int64_t in);
// Loads "<prefix>self_attn.q_proj.weight" etc. (HF names under `prefix`, e.g. "model.layers.3.").
// `in` is the attention projections' input size (hidden_size, or 2 * hidden_size for EAGLE-3).
LayerWeights load_decoder_layer(const WeightSource& src, const std::string& prefix, const ModelConfig& c,
                                WeightArena& arena, int64_t in);
// The names of one decoder layer's tensors under `prefix`.
std::vector<std::string> decoder_layer_names(const ModelConfig& c, const std::string& prefix);

}  // namespace dspark
