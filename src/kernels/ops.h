// Elementwise and row-wise operations of the transformer forward pass (f32 activations).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace dspark {

// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for `rows` rows of `dim` values.
void rmsnorm(const float* x, int64_t ldx, const float* weight, float* y, int64_t ldy, int rows, int dim,
             float eps);

// Rotates `n_heads` heads of each row in place (HF rotate_half convention: pairs (i, i + hd/2)).
// cos/sin hold hd/2 values per row.
void rope(float* x, int64_t ldx, int rows, int n_heads, int head_dim, const float* cos, const float* sin);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]; gate_up rows are [gate | up].
void silu_mul(const float* gate_up, int64_t ld_in, float* out, int64_t ld_out, int rows, int inter);

// Copies embedding rows table[ids[r]] (bf16 or f32, row length dim) into out.
void embed_rows(const void* table, DType dtype, int dim, const int32_t* ids, int rows, float* out,
                int64_t ldo);

// Returns the index of the largest value (the first one on ties). NaNs after x[0] are skipped;
// a NaN x[0] is returned (index 0), as the plain loop `if (x[i] > x[best]) best = i` does.
int argmax(const float* x, int n);

namespace detail {
void silu_mul_avx2(const float* gate_up, int64_t ld_in, float* out, int64_t ld_out, int rows, int inter);
int argmax_avx2(const float* x, int n);
void rmsnorm_avx2(const float* x, int64_t ldx, const float* weight, float* y, int64_t ldy, int rows,
                  int dim, float eps);
}  // namespace detail

}  // namespace dspark
